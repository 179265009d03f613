package jepsen

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/jepsen/history"
)

// NameUnavailability is the checker of client-observed unavailability.
const NameUnavailability = "unavailability-bounded"

// UnavailabilityBound is the longest a caller may see no successful call
// while a quorum is up and connected: about one election with default
// settings, plus slack (DESIGN.md, "Failover as a client sees it").
const UnavailabilityBound = 3 * time.Second

// ProbeSample is one call of an availability prober (availability.jsonl).
type ProbeSample struct {
	// Node is the node the prober is pinned to: every call goes to it.
	Node       string `json:"node"`
	InvokeNs   int64  `json:"invoke_ns"`
	CompleteNs int64  `json:"complete_ns"`
	OK         bool   `json:"ok"`
	Error      string `json:"error,omitempty"`
}

// probeDeadline is each probe call's deadline: far longer than the bound,
// so that a node that waits out its caller's deadline shows as a window
// longer than the bound.
const probeDeadline = 8 * time.Second

// probeAvailability pins one prober to each node: a plain gRPC caller (no
// client library, no failover, as any language's gRPC client pinned to one
// address behind a load balancer is) that acquires and releases a resource
// of its own through that node, with a request id, every 100 ms, and
// records every call in out until ctx ends (a call counts as served when
// the service decided it, see served). What it measures is the
// node's own behaviour when the leader goes silent: whether its forwarding
// gives up on that leader and finds the next.
func probeAvailability(ctx context.Context, ids, addrs []string, out *history.Writer) {
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := grpc.NewClient(addrs[i], grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return
			}
			defer conn.Close()
			lc := api.NewLeaseServiceClient(conn)
			for n := 0; ctx.Err() == nil; n++ {
				s := ProbeSample{Node: ids[i], InvokeNs: history.Now()}
				cctx, cancel := context.WithTimeout(ctx, probeDeadline)
				r, err := lc.Acquire(cctx, &api.AcquireRequest{
					Resource:  "probe/" + ids[i], // outside ResourcePrefix: not watched, not checked
					Holder:    "probe-" + ids[i],
					Ttl:       durationpb.New(2 * time.Second),
					RequestId: fmt.Sprintf("probe-%s-%d-%d", ids[i], s.InvokeNs, n),
				})
				if err == nil {
					_, err = lc.Release(cctx, &api.ReleaseRequest{LeaseId: r.Lease.Id})
				}
				cancel()
				if ctx.Err() != nil {
					return // the run ended: not a sample
				}
				s.CompleteNs, s.OK = history.Now(), served(err)
				if err != nil {
					s.Error = err.Error()
				}
				_ = out.Write(s)
				sleepCtx(ctx, 100*time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

// served reports whether a probe's call was served: it succeeded, or the
// service answered with a decision of its own (the probe resource still
// held by the probe's own lease, after a release whose answer was lost).
// Unavailable and deadline errors are not service.
func served(err error) bool {
	switch status.Code(err) {
	case codes.OK, codes.FailedPrecondition, codes.NotFound:
		return true
	}
	return false
}

// ReadProbeSamples reads an availability.jsonl.
func ReadProbeSamples(b []byte) ([]ProbeSample, error) {
	var out []ProbeSample
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var s ProbeSample
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			return out, err
		}
		out = append(out, s)
	}
	return out, nil
}

// boundedKinds are the faults that leave a quorum of nodes up and
// connected: one node killed, paused or cut off. During them (and while a
// killed or paused node comes back), a caller pinned to a node of that
// quorum must see a successful call at least every UnavailabilityBound.
var boundedKinds = map[string]bool{
	NemKill: true, NemKillLeader: true, NemPause: true, NemPauseLeader: true, NemPartitionLeader: true, NemSilentLeader: true,
}

// settleAfterHeal is how long after a heal a window still counts as the
// fault's: the node that was hit rejoins, and may lead again.
const settleAfterHeal = 5 * time.Second

// unavailableWindow is a stretch during which one prober saw no success.
type unavailableWindow struct {
	node       string
	start, end int64
	failed     int
	lastErr    string
}

// CheckUnavailabilityBounded checks what a caller sees of a fault that
// leaves a quorum up: for each prober, a window runs from the invocation
// of a call that failed (or succeeded only after more than bound) to the
// completion of the next success; a window that overlaps a fault of
// boundedKinds (until settleAfterHeal after its heal), whose node was not
// the one hit, and that overlaps no other fault, must be at most bound.
// The witness and detail give the distribution of the judged windows.
func CheckUnavailabilityBounded(samples []ProbeSample, faults []history.Fault, bound time.Duration) (Result, []time.Duration) {
	f := newFinding(NameUnavailability)
	windows := probeWindows(samples, bound)
	spans := heldSpans(faults)
	var judged []time.Duration
	for _, w := range windows {
		bounded, other, hit := false, false, false
		for _, sp := range spans {
			if sp.end < w.start || sp.start > w.end {
				continue
			}
			if boundedKinds[sp.kind] {
				bounded = true
			} else {
				other = true
			}
			hit = hit || sp.target == w.node
		}
		if !bounded || other || hit {
			continue
		}
		d := time.Duration(w.end - w.start)
		judged = append(judged, d)
		f.r.Checked++
		if d > bound {
			f.invalid("unavailable-too-long", "a caller pinned to %s saw no successful call for %v (%d calls failed or slow, from %s to %s; last error: %s) while a quorum was up; bound %v",
				w.node, d.Round(time.Millisecond), w.failed, rt(w.start), rt(w.end), w.lastErr, bound)
		}
	}
	sort.Slice(judged, func(i, j int) bool { return judged[i] < judged[j] })
	if f.r.Verdict == Valid && f.r.Checked == 0 && len(samples) > 0 {
		// Probes ran, and no fault of a bounded kind cost them anything.
		f.r.Checked = len(samples)
		return f.r, judged
	}
	return f.done("window of unavailability during a fault that leaves a quorum up"), judged
}

// windowsString summarises judged windows: count, median and max.
func windowsString(ws []time.Duration) string {
	if len(ws) == 0 {
		return "no window"
	}
	return fmt.Sprintf("%d windows, median %v, max %v", len(ws), ws[len(ws)/2].Round(time.Millisecond), ws[len(ws)-1].Round(time.Millisecond))
}

// probeWindows returns each prober's windows of unavailability: from the
// invocation of a call that failed (or succeeded only after more than
// bound) to the completion of the next success; a window never closed
// ends at its last sample.
func probeWindows(samples []ProbeSample, bound time.Duration) []unavailableWindow {
	byNode := map[string][]ProbeSample{}
	for _, s := range samples {
		byNode[s.Node] = append(byNode[s.Node], s)
	}
	var windows []unavailableWindow
	for node, ss := range byNode {
		sort.Slice(ss, func(i, j int) bool { return ss[i].InvokeNs < ss[j].InvokeNs })
		var open *unavailableWindow
		for _, s := range ss {
			slow := time.Duration(s.CompleteNs-s.InvokeNs) > bound
			switch {
			case s.OK && !slow:
				if open != nil {
					open.end = s.CompleteNs
					windows = append(windows, *open)
					open = nil
				}
			case open == nil:
				open = &unavailableWindow{node: node, start: s.InvokeNs, end: s.CompleteNs}
				fallthrough
			default:
				open.failed++
				open.end = s.CompleteNs
				if s.Error != "" {
					open.lastErr = s.Error
				}
				if s.OK { // a slow success closes the window it opened
					windows = append(windows, *open)
					open = nil
				}
			}
		}
		if open != nil { // never recovered before the run ended
			windows = append(windows, *open)
		}
	}
	return windows
}

// heldSpan is a fault from its start until settleAfterHeal after its heal.
type heldSpan struct {
	kind, target string
	start, end   int64
}

// heldSpans pairs each fault's start and heal (a fault never healed runs
// to the end of time).
func heldSpans(faults []history.Fault) []heldSpan {
	var spans []heldSpan
	starts := map[string]history.Fault{}
	for _, ft := range faults {
		key := ft.Kind + "/" + ft.Target
		switch ft.Phase {
		case "start":
			starts[key] = ft
		case "heal":
			if st, ok := starts[key]; ok {
				spans = append(spans, heldSpan{ft.Kind, ft.Target, st.TimeNs, ft.TimeNs + int64(settleAfterHeal)})
				delete(starts, key)
			}
		}
	}
	for key, st := range starts { // never healed: to the end of time
		spans = append(spans, heldSpan{st.Kind, key[len(st.Kind)+1:], st.TimeNs, 1<<63 - 1})
	}
	return spans
}
