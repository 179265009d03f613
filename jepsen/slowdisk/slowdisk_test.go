package slowdisk

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// needFUSE skips without root or /dev/fuse, except under CI=true: there
// it fails (.ci/run says whether the machine has /dev/fuse).
func needFUSE(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

func mount(t *testing.T) (*Disk, string, string) {
	t.Helper()
	needFUSE(t)
	dir := t.TempDir()
	mnt, back := filepath.Join(dir, "mnt"), filepath.Join(dir, "back")
	for _, p := range []string{mnt, back} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d, err := Mount(mnt, back)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Unmount(); err != nil {
			t.Error(err)
		}
	})
	return d, mnt, back
}

// writeSync writes name under the mount, fsyncs it and renames it, as a
// log store does, and returns how long the fsync took.
func writeSync(t *testing.T, mnt, name string) time.Duration {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(mnt, name)), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(mnt, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("entry"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if err := os.Rename(filepath.Join(mnt, name), filepath.Join(mnt, name+".done")); err != nil {
		t.Fatal(err)
	}
	return took
}

// The chosen nodes' fsyncs wait, the others' do not, healing ends it, and
// what is written through the mount is in the backing directory.
func TestOnlyTheChosenDirsFsyncsWait(t *testing.T) {
	d, mnt, back := mount(t)
	writeSync(t, mnt, "n1/before")
	if d.Delayed() != 0 {
		t.Fatalf("%d fsyncs held before Slow", d.Delayed())
	}
	d.Slow(300*time.Millisecond, "n1", "n2")
	if took := writeSync(t, mnt, "n1/wal/seg"); took < 300*time.Millisecond {
		t.Fatalf("a slowed node's fsync took %v, want at least 300ms", took)
	}
	writeSync(t, mnt, "n2/raft.db")
	writeSync(t, mnt, "n3/raft.db")
	writeSync(t, mnt, "fencedkv.db")
	if got := d.Delayed(); got != 2 {
		t.Fatalf("%d fsyncs held, want 2 (n1's and n2's, not n3's or fencedkv's)", got)
	}
	d.Slow(0)
	writeSync(t, mnt, "n1/after")
	if got := d.Delayed(); got != 2 {
		t.Fatalf("%d fsyncs held after the heal, want still 2", got)
	}
	for _, name := range []string{"n1/before.done", "n1/wal/seg.done", "n2/raft.db.done", "n3/raft.db.done", "fencedkv.db.done", "n1/after.done"} {
		b, err := os.ReadFile(filepath.Join(back, name))
		if err != nil || string(b) != "entry" {
			t.Fatalf("%s in the backing dir: %q, %v", name, b, err)
		}
	}
}

func TestUnmountLeavesTheBackingDirWhole(t *testing.T) {
	needFUSE(t)
	dir := t.TempDir()
	mnt, back := filepath.Join(dir, "mnt"), filepath.Join(dir, "back")
	os.Mkdir(mnt, 0o755)
	os.Mkdir(back, 0o755)
	d, err := Mount(mnt, back)
	if err != nil {
		t.Fatal(err)
	}
	writeSync(t, mnt, "n1/x")
	if err := d.Unmount(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(mnt); len(ents) != 0 {
		t.Fatalf("the mountpoint still shows %d entries after Unmount", len(ents))
	}
	if _, err := os.Stat(filepath.Join(back, "n1", "x.done")); err != nil {
		t.Fatal(err)
	}
}
