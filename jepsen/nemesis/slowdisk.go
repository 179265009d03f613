package nemesis

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/leasefence/leasefence/jepsen/history"
)

// SlowDisk slows the nodes' fsyncs (package slowdisk's Disk).
type SlowDisk interface {
	// Slow makes every fsync under the data dirs of nodes ids wait delay;
	// Slow(0) heals.
	Slow(delay time.Duration, ids ...string)
	// Delayed counts the fsyncs held so far.
	Delayed() int64
}

// Slow-disk timings (history.NemSlowDisk). The delay is longer than the
// silence after which the client moves a keep-alive stream (over 1 s,
// looked at every 0.5 s), so that a node which answered nothing until its
// commits were done would cost keep-alive leases every renewal. An entry
// may wait for the write in progress and then its own, so a commit takes
// one to two delays (1.8–4.4 s): within the node's 5 s bound on a
// keep-alive renewal and the 6.4 s a renewal sent at a third of a 10 s
// ttl has left. The hold outlasts that ttl, so that such a lease would
// end.
const (
	SlowDiskDelay     = 1800 * time.Millisecond
	SlowDiskDelaySpan = 400 * time.Millisecond
	SlowDiskHold      = 14 * time.Second
	SlowDiskHoldSpan  = 4 * time.Second
)

// slowDisk makes every node's fsyncs slow for SlowDiskHold (+ up to
// SlowDiskHoldSpan), each by SlowDiskDelay (+ up to SlowDiskDelaySpan),
// and reports the leaders seen meanwhile. It is effective when fsyncs
// were held.
func (n *Nemesis) slowDisk(ctx context.Context) {
	if n.disk == nil {
		n.notDone(history.NemSlowDisk, "error: the nodes run on no slow disk (a run with slow-disk mounts one; not with docker)")
		return
	}
	bg := context.WithoutCancel(ctx) // always heal
	delay := SlowDiskDelay + time.Duration(n.rng.Int64N(int64(SlowDiskDelaySpan)))
	hold := SlowDiskHold + time.Duration(n.rng.Int64N(int64(SlowDiskHoldSpan)))
	ids := n.nodes.Nodes()
	leader, term := n.currentTerm(bg)
	before := n.disk.Delayed()
	n.disk.Slow(delay, ids...)
	desc := fmt.Sprintf("every fsync of %s's data dirs waits %v", strings.Join(ids, ","), delay.Round(time.Millisecond))
	n.progress(fmt.Sprintf("nemesis: %s: %s for %v", history.NemSlowDisk, desc, hold.Round(time.Millisecond)))
	n.record(history.Fault{Phase: "start", Kind: history.NemSlowDisk, Detail: fmt.Sprintf("%s; leader %s, term %d", desc, orNone(leader), term)})
	obs := n.observe(bg, hold)
	n.disk.Slow(0)
	held := n.disk.Delayed() - before
	seen := []string{fmt.Sprintf("%d fsyncs held", held), fmt.Sprintf("%s over %d polls", obs.termsString(), obs.polls)}
	seen = append(seen, "after heal leader "+orNone(n.waitLeader(bg, 10*time.Second)))
	n.record(history.Fault{Phase: "heal", Kind: history.NemSlowDisk, Effective: held > 0, Detail: strings.Join(seen, "; ")})
}
