package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencebolt"
	"github.com/leasefence/leasefence/internal/testcluster"
)

// apps are instances of examples/embedded (each an application process
// embedding a node), with every line they print.
type apps struct {
	t     *testing.T
	bin   string
	args  map[string][]string
	mu    sync.Mutex
	lines []string // "id| line"
	cmds  map[string]*exec.Cmd
	done  map[string]chan struct{}
}

func (a *apps) start(id string) {
	a.t.Helper()
	cmd := exec.Command(a.bin, a.args[id]...)
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			a.mu.Lock()
			a.lines = append(a.lines, id+"| "+sc.Text())
			a.mu.Unlock()
		}
	}()
	go func() { _ = cmd.Wait(); w.Close(); close(done) }()
	a.mu.Lock()
	a.cmds[id], a.done[id] = cmd, done
	a.mu.Unlock()
}

func (a *apps) signal(id string, sig syscall.Signal) {
	a.t.Helper()
	if err := a.cmds[id].Process.Signal(sig); err != nil {
		a.t.Fatalf("signal %v to %s: %v", sig, id, err)
	}
}

func (a *apps) waitExit(id string) {
	a.t.Helper()
	select {
	case <-a.done[id]:
	case <-time.After(30 * time.Second):
		a.t.Fatalf("%s did not exit", id)
	}
}

// mark is the number of lines seen so far.
func (a *apps) mark() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.lines)
}

// wait returns the id and the submatches of the first line after from that
// matches re (applied to "id| line").
func (a *apps) wait(from int, re string) (string, []string) {
	a.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) {
		a.mu.Lock()
		for _, l := range a.lines[from:] {
			if m := rx.FindStringSubmatch(l); m != nil {
				a.mu.Unlock()
				id, _, _ := strings.Cut(l, "|")
				return id, m
			}
		}
		a.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
	a.t.Fatalf("no line matching %q within 45s; output:\n%s", re, a.output())
	return "", nil
}

func (a *apps) output() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.lines
	if len(out) > 200 {
		out = out[len(out)-200:]
	}
	return strings.Join(out, "\n")
}

func atoi(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestEmbeddedAppsFencedWriterSurvivesKillAndFreeze runs three real
// application processes (examples/embedded, built here), each embedding a
// node, that elect one writer of a report in a shared bbolt store behind a
// fence guard. The writer is frozen (SIGSTOP) past its lease: a new writer
// takes over with a higher token, and the thawed one's prepared write is
// refused as stale. The next writer is killed with SIGKILL and restarted on
// its data dir: tokens go on rising. Finally the store holds sections in
// token order only, and a write with an older token is refused.
func TestEmbeddedAppsFencedWriterSurvivesKillAndFreeze(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts real application processes")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "embedded")
	if out, err := exec.Command("go", "build", "-race", "-o", bin, "github.com/leasefence/leasefence/examples/embedded").CombinedOutput(); err != nil {
		t.Fatalf("building the example: %v\n%s", err, out)
	}
	addrs := testcluster.FreeAddrs(t, 3)
	ids := []string{"n1", "n2", "n3"}
	var peers []string
	for i, id := range ids {
		peers = append(peers, id+"="+addrs[i])
	}
	store := filepath.Join(dir, "shared", "report.db")
	a := &apps{t: t, bin: bin, args: map[string][]string{}, cmds: map[string]*exec.Cmd{}, done: map[string]chan struct{}{}}
	for i, id := range ids {
		a.args[id] = []string{"-id", id, "-listen", addrs[i], "-peers", strings.Join(peers, ","), "-insecure",
			"-data-dir", filepath.Join(dir, id), "-store", store, "-ttl", "2s", "-prepare", "300ms"}
	}
	t.Cleanup(func() {
		for id, cmd := range a.cmds {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			<-a.done[id]
		}
	})
	for _, id := range ids {
		a.start(id)
	}

	// One writer.
	w1, m := a.wait(0, `\| (n\d): wrote section 1 with token (\d+)$`)
	t1 := atoi(t, m[2])

	// Freeze it while it prepares a section, past its lease.
	from := a.mark()
	a.wait(from, `^`+w1+`\| `+w1+`: preparing section`)
	a.signal(w1, syscall.SIGSTOP)
	w2, m := a.wait(a.mark(), `\| (n\d): wrote section \d+ with token (\d+)$`)
	t2 := atoi(t, m[2])
	if w2 == w1 || t2 <= t1 {
		t.Fatalf("after freezing %s (token %d): %s wrote with token %d", w1, t1, w2, t2)
	}
	from = a.mark()
	a.signal(w1, syscall.SIGCONT)
	_, m = a.wait(from, `^`+w1+`\| `+w1+`: write refused: stale token (\d+), the store has accepted (\d+)$`)
	if got, highest := atoi(t, m[1]), atoi(t, m[2]); got != t1 || highest < t2 {
		t.Fatalf("thawed %s: refused token %d (highest %d), want %d refused below %d", w1, got, highest, t1, t2)
	}

	// kill -9 the current writer; another takes over; restart the killed
	// one on its data dir.
	cur, tCur := w2, t2
	from = a.mark()
	a.signal(cur, syscall.SIGKILL)
	a.waitExit(cur)
	w3, m := a.wait(from, `\| (n\d): writer with token (\d+)$`)
	t3 := atoi(t, m[2])
	if w3 == cur || t3 <= tCur {
		t.Fatalf("after killing %s (token %d): %s got token %d", cur, tCur, w3, t3)
	}
	from = a.mark()
	a.start(cur)
	a.wait(from, `^`+cur+`\| `+cur+`: started`)

	// A graceful stop of the writer hands leadership and the lease on; the
	// next token continues above every earlier one.
	from = a.mark()
	a.signal(w3, syscall.SIGTERM)
	a.waitExit(w3)
	w4, m := a.wait(from, `\| (n\d): writer with token (\d+)$`)
	t4 := atoi(t, m[2])
	if w4 == w3 || t4 <= t3 {
		t.Fatalf("after stopping %s (token %d): %s got token %d", w3, t3, w4, t4)
	}
	a.wait(a.mark(), `^`+w4+`\| `+w4+`: wrote section \d+ with token `+m[2]+`$`)
	for _, id := range ids {
		if id != w3 {
			a.signal(id, syscall.SIGTERM)
			a.waitExit(id)
		}
	}

	// The store: sections in token order, and an older token refused.
	db, err := bolt.Open(store, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var last uint64
	var sections int
	if err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("report"))
		if b == nil {
			return errors.New("no report bucket")
		}
		return b.ForEach(func(_, v []byte) error {
			var tok uint64
			if _, err := fmt.Sscanf(string(v), "token %d:", &tok); err != nil {
				return fmt.Errorf("section %q: %v", v, err)
			}
			if tok < last {
				return fmt.Errorf("section %q after token %d", v, last)
			}
			last = tok
			sections++
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	g, err := fencebolt.New(db)
	if err != nil {
		t.Fatal(err)
	}
	highest, err := g.Highest("report/daily")
	if err != nil {
		t.Fatal(err)
	}
	if highest != last || last < t4 {
		t.Fatalf("store: highest %d, last section's token %d, last grant %d", highest, last, t4)
	}
	err = g.Update(fence.Token{Scope: "report/daily", Value: t2}, func(*bolt.Tx) error { return nil })
	if st, ok := fence.IsStale(err); !ok || st.Highest != highest {
		t.Fatalf("write with the older token %d: %v", t2, err)
	}
	t.Logf("%d sections; tokens %d (%s, frozen) < %d (%s) <= %d (%s, killed) < %d (%s) < %d (%s)",
		sections, t1, w1, t2, w2, tCur, cur, t3, w3, t4, w4)
	if _, err := os.Stat(filepath.Join(dir, cur, "raft.db")); err != nil {
		t.Fatalf("the restarted node's data dir: %v", err)
	}
}
