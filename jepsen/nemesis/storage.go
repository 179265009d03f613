package nemesis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
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
		path := filepath.Join(cl.DataDir(id), "raft.db")
		index, err = CorruptCommandEntry(path, n.resourcePrefix)
		detail = fmt.Sprintf("SIGTERM; entry %d's resource name changed in %s", index, path)
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

// CorruptCommandEntry changes one byte of the resource name in the newest
// command entry of the raft.db at path (the node must be stopped) whose
// body names a resource starting with prefix, in every copy of that
// entry's bytes in the file (bbolt's free pages may hold older copies),
// keeping the length. It returns the entry's index.
func CorruptCommandEntry(path, prefix string) (uint64, error) {
	store, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: time.Second}})
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", path, err)
	}
	first, _ := store.FirstIndex()
	last, _ := store.LastIndex()
	var data []byte
	var index uint64
	for i := last; i >= first && i > 0; i-- {
		var l raft.Log
		if store.GetLog(i, &l) == nil && l.Type == raft.LogCommand && bytes.Contains(l.Data, []byte(prefix)) {
			data, index = l.Data, i
			break
		}
	}
	store.Close()
	if data == nil {
		return 0, errors.New("no command entry naming a resource in the log")
	}
	file, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	at := bytes.Index(data, []byte(prefix)) + len(prefix) - 1 // the prefix's last byte
	bad := bytes.Clone(data)
	bad[at] ^= 0x01
	if bytes.Count(file, data) == 0 {
		return 0, fmt.Errorf("entry %d's bytes not found in %s", index, path)
	}
	if err := os.WriteFile(path, bytes.ReplaceAll(file, data, bad), 0o600); err != nil {
		return 0, err
	}
	return index, nil
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
