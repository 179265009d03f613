package nemesis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"go.etcd.io/bbolt"

	"github.com/leasefence/leasefence/jepsen/history"
)

// refusalMarkers are what leased says when it refuses corrupt storage
// (cluster/corrupt.go, cluster/statecheck.go).
var refusalMarkers = []string{"corrupt log entry", "corrupt snapshot", "state is corrupt"}

// setAsideMarker is what leased logs when it will not restore a corrupt
// snapshot (cluster/corrupt.go); it then starts from an older one or
// refuses.
const setAsideMarker = "corrupt snapshot; it will not be restored"

func (n *Nemesis) storage(ctx context.Context, hold time.Duration) {
	cl, id, ok := n.clusterFollower(ctx, history.NemStorage, "no follower to corrupt (no leader)")
	if !ok {
		return
	}
	n.progress(fmt.Sprintf("nemesis: storage: %s stopped, one byte of a committed entry changed, restarted", id))
	p := cl.Process(id)
	p.Kill(syscall.SIGTERM, 15*time.Second)
	out := &history.StorageOutcome{}
	var index uint64
	var err error
	var detail string
	if snap, sindex, ok := newestSnapshot(cl.DataDir(id)); ok && n.rng.IntN(2) == 0 {
		err = flipByte(filepath.Join(snap, "state.bin"))
		index, out.Snapshot = sindex, filepath.Base(snap)
		detail = fmt.Sprintf("SIGTERM; one byte of snapshot %s (index %d) changed", out.Snapshot, index)
	} else {
		var path string
		change := ChangeName
		if n.rng.IntN(2) == 0 {
			change = ChangeType
		}
		index, path, err = CorruptCommandEntry(cl.DataDir(id), n.resourcePrefix, change)
		detail = fmt.Sprintf("SIGTERM; entry %d's %s changed in %s", index, change, path)
	}
	if err != nil {
		index = 0
	}
	out.Index = index
	n.record(history.Fault{Phase: "start", Kind: history.NemStorage, Target: id, Detail: errString(err, detail)})
	logBefore := len(p.Tail(1 << 30))
	if err == nil && index > 0 {
		if rerr := p.Start(); rerr == nil {
			observeStorage(ctx, out, cl, id, p, logBefore, hold+10*time.Second)
		}
	}
	// Heal: replace the node, whatever it did.
	p.Kill(syscall.SIGTERM, 15*time.Second)
	all := len(cl.Nodes())
	rerr := cl.RemoveMember(context.WithoutCancel(ctx), id)
	if rerr == nil {
		cl.WaitMembers(context.WithoutCancel(ctx), all-1, id, false)
		rerr = os.RemoveAll(cl.DataDir(id))
	}
	if rerr == nil {
		rerr = cl.Rejoin(context.WithoutCancel(ctx), id)
	}
	joined := rerr == nil && cl.WaitMembers(context.WithoutCancel(ctx), all, id, true) && cl.WaitCaughtUp(context.WithoutCancel(ctx), id)
	what := "served on"
	switch {
	case out.Refused:
		what = "refused to run"
	case out.Fenced:
		what = "fenced itself"
	case out.SetAside:
		what = "set the corrupt snapshot aside and rebuilt from an older one and its log"
	case !out.Served:
		what = "undecided"
	}
	n.record(history.Fault{Phase: "heal", Kind: history.NemStorage, Target: id, Effective: index > 0 && joined, Storage: out,
		Detail: errString(rerr, fmt.Sprintf("after the change it %s; replaced (removed, wiped, rejoined and caught up: %v)", what, joined))})
}

// observeStorage watches node id for up to d after its restart on corrupt
// storage, into o.
func observeStorage(ctx context.Context, o *history.StorageOutcome, cl Cluster, id string, p Process, logBefore int, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		select {
		case <-p.Exited():
			log := p.Tail(1 << 30)
			if logBefore < len(log) {
				log = log[logBefore:]
			}
			for _, m := range refusalMarkers {
				o.Refused = o.Refused || strings.Contains(log, m)
			}
			return
		default:
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cl.Status(sctx, id)
		cancel()
		if err == nil {
			if st.StateCorrupt != "" {
				o.Fenced = true
				return
			}
			if st.AppliedIndex >= o.Index {
				log := p.Tail(1 << 30)
				if logBefore < len(log) {
					log = log[logBefore:]
				}
				if o.Snapshot != "" && strings.Contains(log, setAsideMarker) {
					o.SetAside = true
				} else {
					o.Served = true
				}
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// EntryChange is which bit of a command entry CorruptCommandEntry flips.
type EntryChange int

const (
	// ChangeName flips the low bit of the resource name's last prefix
	// byte: the body changes, as a bad disk under a name or token would.
	ChangeName EntryChange = iota
	// ChangeType flips the high bit of the entry's type byte (0x02 →
	// 0x82): a known entry turns into an unknown "ignorable" one, which a
	// node that does not check such entries skips without a word (the
	// planted ignorable-unchecked).
	ChangeType
)

func (c EntryChange) String() string {
	if c == ChangeType {
		return "type byte"
	}
	return "resource name"
}

// CorruptCommandEntry flips one bit (change says which) of a committed
// command entry naming a resource starting with prefix in the log of the
// stopped node whose data dir is dataDir, in every copy of that entry's
// bytes, keeping the length: a bad disk under the log, which the node's own
// entry check must catch. The log is where the data dir keeps it: raft-wal
// segments when DATA_DIR/wal/wal-meta.db exists (--log-store wal), raft.db
// otherwise. It returns the entry's index and the file it changed.
func CorruptCommandEntry(dataDir, prefix string, change EntryChange) (index uint64, path string, err error) {
	walDir := filepath.Join(dataDir, "wal")
	if _, err := os.Stat(filepath.Join(walDir, metadb.FileName)); err == nil {
		return corruptWALEntry(walDir, prefix, change)
	}
	path = filepath.Join(dataDir, "raft.db")
	index, err = corruptBoltEntry(path, prefix, change)
	return index, path, err
}

// corruptBoltEntry changes the newest command entry naming a resource
// starting with prefix in the raft.db at path, in every copy of its bytes
// in the file (bbolt's free pages may hold older copies).
func corruptBoltEntry(path, prefix string, change EntryChange) (uint64, error) {
	store, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: time.Second}})
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", path, err)
	}
	index, data := newestNamedEntry(store, math.MaxUint64, prefix)
	store.Close()
	if data == nil {
		return 0, errors.New("no command entry naming a resource in the log")
	}
	file, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	if bytes.Count(file, data) == 0 {
		return 0, fmt.Errorf("entry %d's bytes not found in %s", index, path)
	}
	if err := os.WriteFile(path, bytes.ReplaceAll(file, data, flipped(data, prefix, change)), 0o600); err != nil {
		return 0, err
	}
	return index, nil
}

// corruptWALEntry changes one command entry naming a resource starting
// with prefix in the raft-wal log in dir, only inside the entry's data, so
// every frame keeps its length and type.
//
// The entry is the newest named one that raft-wal itself reads back
// changed. raft-wal checks a CRC only over the last batch of its open
// segment (a mismatch there reads as a torn write: the batch is dropped
// without a word), so a change inside that batch would prove only the
// node's check of how far its log reached (cluster/walstore.go,
// durableWAL; TestStorageNemesisChangeIsRefused), never its CRC-32C of
// every command entry, the one check that sees a bad disk under an older
// entry. Only when every named entry is in that batch is the newest
// changed anyway: the node must refuse that too.
//
// raft-wal has no read-only open (Open recovers the tail segment and
// writes wal-meta.db), so entries are looked up, and each change tried,
// in copies of dir.
func corruptWALEntry(dir, prefix string, change EntryChange) (uint64, string, error) {
	tmp, err := os.MkdirTemp("", "jepsen-wal-")
	if err != nil {
		return 0, "", err
	}
	defer os.RemoveAll(tmp)
	base := filepath.Join(tmp, "base")
	if err := copyFiles(dir, base); err != nil {
		return 0, "", fmt.Errorf("copy %s: %w", dir, err)
	}
	w, err := raftwal.Open(base, raftwal.WithLogger(hclog.NewNullLogger()))
	if err != nil {
		return 0, "", fmt.Errorf("open a copy of %s: %w", dir, err)
	}
	defer w.Close()
	index, data := newestNamedEntry(w, math.MaxUint64, prefix)
	if data == nil {
		return 0, "", fmt.Errorf("no command entry naming a resource in %s", dir)
	}
	bad := flipped(data, prefix, change)
	// A try that raft-wal drops tells where its last batch begins, so the
	// next candidate is older than that batch: two tries at most, as a rule.
	for range 4 {
		kept, reached, err := walTry(base, filepath.Join(tmp, "try"), index, data, bad)
		if err != nil {
			return 0, "", err
		}
		if reached {
			break
		}
		i, d := newestNamedEntry(w, kept, prefix)
		if d == nil {
			break // every named entry is in the checked batch
		}
		index, data, bad = i, d, flipped(d, prefix, change)
	}
	path, err := replaceInSegments(dir, data, bad)
	return index, path, err
}

// walTry changes data to bad in a copy (to) of the raft-wal dir base and
// opens it: kept is the last index raft-wal then keeps, reached whether it
// reads entry index back changed.
func walTry(base, to string, index uint64, data, bad []byte) (kept uint64, reached bool, err error) {
	if err := copyFiles(base, to); err != nil {
		return 0, false, err
	}
	defer os.RemoveAll(to)
	if _, err := replaceInSegments(to, data, bad); err != nil {
		return 0, false, err
	}
	w, err := raftwal.Open(to, raftwal.WithLogger(hclog.NewNullLogger()))
	if err != nil {
		return 0, false, fmt.Errorf("open a changed copy: %w", err)
	}
	defer w.Close()
	kept, _ = w.LastIndex()
	var l raft.Log
	return kept, w.GetLog(index, &l) == nil && bytes.Equal(l.Data, bad), nil
}

// newestNamedEntry returns the newest command entry at or below index
// below in store whose body contains prefix (nil data: none).
func newestNamedEntry(store raft.LogStore, below uint64, prefix string) (uint64, []byte) {
	first, _ := store.FirstIndex()
	last, _ := store.LastIndex()
	for i := min(last, below); i >= first && i > 0; i-- {
		var l raft.Log
		if store.GetLog(i, &l) == nil && l.Type == raft.LogCommand && bytes.Contains(l.Data, []byte(prefix)) {
			return i, l.Data
		}
	}
	return 0, nil
}

// flipped is data with one bit flipped, the length kept: with ChangeName
// the low bit of the prefix's last byte (the resource name changes), with
// ChangeType the high bit of the type byte.
func flipped(data []byte, prefix string, change EntryChange) []byte {
	bad := bytes.Clone(data)
	if change == ChangeType {
		bad[0] ^= 0x80
		return bad
	}
	bad[bytes.Index(data, []byte(prefix))+len(prefix)-1] ^= 0x01
	return bad
}

// replaceInSegments writes bad over every copy of data in the raft-wal
// segment files (*.wal) in dir, in place, and returns the files changed
// (comma-separated); an error when none holds data.
func replaceInSegments(dir string, data, bad []byte) (string, error) {
	segs, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil {
		return "", err
	}
	var changed []string
	for _, seg := range segs {
		file, err := os.ReadFile(seg)
		if err != nil {
			return "", err
		}
		if !bytes.Contains(file, data) {
			continue
		}
		f, err := os.OpenFile(seg, os.O_WRONLY, 0)
		if err != nil {
			return "", err
		}
		for off := 0; ; {
			i := bytes.Index(file[off:], data)
			if i < 0 {
				break
			}
			if _, err := f.WriteAt(bad, int64(off+i)); err != nil {
				f.Close()
				return "", err
			}
			off += i + len(data)
		}
		if err := f.Close(); err != nil {
			return "", err
		}
		changed = append(changed, seg)
	}
	if len(changed) == 0 {
		return "", fmt.Errorf("the entry's bytes are not in any segment file in %s", dir)
	}
	return strings.Join(changed, ", "), nil
}

// copyFiles copies the regular files of dir into to, made if need be.
func copyFiles(dir, to string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(to, 0o700); err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// newestSnapshot returns the directory and last index of the newest
// snapshot in a node's data dir (raft names them term-index-millis).
func newestSnapshot(dataDir string) (dir string, index uint64, ok bool) {
	states, _ := filepath.Glob(filepath.Join(dataDir, "snapshots", "*", "state.bin"))
	var best [2]uint64
	for _, s := range states {
		var term, idx, ms uint64
		if _, err := fmt.Sscanf(filepath.Base(filepath.Dir(s)), "%d-%d-%d", &term, &idx, &ms); err != nil {
			continue
		}
		if !ok || term > best[0] || (term == best[0] && idx > best[1]) {
			dir, index, ok, best = filepath.Dir(s), idx, true, [2]uint64{term, idx}
		}
	}
	return dir, index, ok
}

// flipByte flips one bit of the byte in the middle of the file.
func flipByte(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if len(data) == 0 {
		return fmt.Errorf("%s is empty", path)
	}
	data[len(data)/2] ^= 0x01
	return os.WriteFile(path, data, 0o600)
}
