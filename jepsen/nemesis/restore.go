package nemesis

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencekv"
	"github.com/leasefence/leasefence/jepsen/history"
)

// MismatchEpochSkew is how many seconds later the odd node's restore
// epoch is under NemRestoreMismatch: its operator read the clock again
// instead of giving every founding node the one value.
const MismatchEpochSkew = 7

// RestorePrefix starts the probe's resources, one scope each, first used
// after the backup: "jn/<restore>-<i>".
const RestorePrefix = "jn/"

// probeScopes is how many new scopes each restore probes.
const probeScopes = 2

// restore runs one fault of kind: NemRestore, NemRestoreMismatch or
// NemRestoreAgain.
func (n *Nemesis) restore(ctx context.Context, kind string) {
	mismatch := kind == history.NemRestoreMismatch
	cl, ok := n.nodes.(Cluster)
	if !ok || n.hist == nil {
		n.notDone(kind, "no cluster of processes or no history to probe into")
		return
	}
	n.mu.Lock()
	k := n.counts[history.NemRestore] + n.counts[history.NemRestoreMismatch] + n.counts[history.NemRestoreAgain] + 1
	n.mu.Unlock()
	ctx = context.WithoutCancel(ctx) // once started, always finish
	var scopes []string
	for i := 0; i < probeScopes; i++ {
		scopes = append(scopes, fmt.Sprintf("%s%d-%d", RestorePrefix, k, i))
	}
	file := filepath.Join(cl.Dir(), fmt.Sprintf("backup-%d.lfb", k))
	var (
		index uint64
		berr  error
	)
	// Restored again: the file an earlier fault of the kind backed up,
	// and the scopes the clusters restored from it have granted in (the
	// cluster lost now granted there too: the new one must beat it).
	again := kind == history.NemRestoreAgain && n.againFrom != ""
	if again {
		file = n.againFrom
		n.progress(fmt.Sprintf("nemesis: restore %d: %s again", k, file))
	} else {
		n.progress(fmt.Sprintf("nemesis: restore %d: backup to %s", k, file))
		index, berr = cl.Backup(ctx, file)
		if kind == history.NemRestoreAgain && berr == nil {
			n.againFrom = file
		}
	}
	probed := scopes
	if kind == history.NemRestoreAgain && berr == nil {
		probed = append(append([]string(nil), n.againScopes...), scopes...)
		n.againScopes = probed
	}
	var pre []string
	if berr == nil {
		// Scopes the backup has never seen: two grants each, each
		// accepted by fencedkv, before the loss.
		for _, s := range scopes {
			for j := 0; j < 2; j++ {
				pre = append(pre, n.probe(ctx, cl, fmt.Sprintf("restore%d-pre%d", k, j), s))
			}
		}
	}
	if mismatch {
		// A backup is older than the loss: let the workers grant for a
		// while after it, so that tokens a lower floor would repeat exist.
		sleepCtx(ctx, 2*time.Second)
	}
	n.progress(fmt.Sprintf("nemesis: restore %d: lose every node, restore from the backup", k))
	what := fmt.Sprintf("backup at index %d", index)
	if again {
		what = "the backup " + file + " restored again"
	}
	n.record(history.Fault{Phase: "start", Kind: kind, Target: "all",
		Detail: errString(berr, fmt.Sprintf("%s; before the loss: %s; SIGKILL every node", what, strings.Join(pre, ", ")))})
	if berr != nil {
		n.record(history.Fault{Phase: "heal", Kind: kind, Target: "all", Detail: "no backup, nothing lost"})
		return
	}
	lost := filepath.Join(cl.Dir(), fmt.Sprintf("lost-%d", k))
	odd, healed := "", "a new cluster from the backup (default bump) has a leader"
	if mismatch {
		odd = cl.Nodes()[(k-1)%len(cl.Nodes())]
	}
	rerr := cl.RestoreAll(ctx, file, lost, odd)
	if rerr == nil && n.onRestore != nil {
		n.onRestore()
	}
	if odd != "" {
		healed = fmt.Sprintf("a new cluster from the backup has a leader, %s; %s was given a restore epoch %d s later and started first",
			cl.Leader(ctx), odd, MismatchEpochSkew)
	}
	// The heal is when the new cluster serves: CheckRestore holds every
	// acquire invoked after it, the probe's below included, to the loss.
	n.record(history.Fault{Phase: "heal", Kind: kind, Target: "all", Effective: rerr == nil,
		Detail: errString(rerr, healed)})
	if rerr != nil {
		return
	}
	var post []string
	for _, s := range probed {
		post = append(post, n.probe(ctx, cl, fmt.Sprintf("restore%d-post", k), s))
	}
	n.progress(fmt.Sprintf("nemesis: restore %d: after it: %s", k, strings.Join(post, ", ")))
	if odd != "" {
		err := cl.Refound(ctx, odd, file, filepath.Join(lost, odd+"-mismatched"))
		n.progress(fmt.Sprintf("nemesis: restore %d: %s restored again with the others' epoch: %s", k, odd, errString(err, "started")))
	}
}

// probe acquires scope (its own resource), writes to fencedkv under the
// token and releases, recording the acquire and the write in the history.
// It returns a summary for the fault's detail.
func (n *Nemesis) probe(ctx context.Context, cl Cluster, tag, scope string) string {
	op := tag + "-" + scope
	c, err := client.New(client.Config{Endpoints: cl.Endpoints()})
	if err != nil {
		return scope + ": " + err.Error()
	}
	defer c.Close()
	inv := history.Record{Kind: history.Invoke, Worker: "restore", Op: op, Type: history.OpAcquire, Resource: scope, RequestID: history.RequestIDOf(op), TimeNs: history.Now()}
	_ = n.hist.Write(inv)
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	l, err := c.Acquire(actx, scope, client.WithTTL(n.ttl), client.WithHolder("restore"), client.WithRequestID(history.RequestIDOf(op)))
	cancel()
	done := inv
	done.Kind, done.TimeNs = history.Complete, history.Now()
	switch {
	case err == nil:
		done.Result, done.Token, done.Lease = history.OK, l.Token(), l.ID().String()
	case errors.Is(err, client.ErrHeld):
		done.Result, done.Error = history.Fail, acquireError(err)
	default:
		done.Result, done.Error = history.Unknown, err.Error()
	}
	_ = n.hist.Write(done)
	if err != nil {
		return fmt.Sprintf("%s: acquire: %v", scope, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = l.Release(rctx)
		cancel()
	}()
	winv := history.Record{Kind: history.Invoke, Worker: "restore", Op: op + "-w", Type: history.OpProbeWrite, Resource: scope, Token: l.Token(), Lease: l.ID().String(), TimeNs: history.Now()}
	_ = n.hist.Write(winv)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = n.kv.Put(wctx, scope, fence.Token{Scope: l.Scope(), Value: l.Token()}, []byte(op))
	cancel()
	wdone := winv
	wdone.Kind, wdone.TimeNs = history.Complete, history.Now()
	switch {
	case err == nil:
		wdone.Result = history.OK
	case errors.Is(err, fencekv.ErrIndeterminate):
		wdone.Result, wdone.Error = history.Unknown, err.Error()
	default:
		wdone.Result, wdone.Error = history.Fail, err.Error()
	}
	_ = n.hist.Write(wdone)
	if err != nil {
		return fmt.Sprintf("%s token %d, write: %v", scope, l.Token(), err)
	}
	return fmt.Sprintf("%s token %d", scope, l.Token())
}

// acquireError is how a failed acquire's error is recorded, as the
// workers record it (the top-level acquireError): a refusal because the
// lease is held starts with history.HeldPrefix.
func acquireError(err error) string {
	if errors.Is(err, client.ErrHeld) {
		return history.HeldPrefix + err.Error()
	}
	return err.Error()
}
