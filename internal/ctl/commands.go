package ctl

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/internal/buildinfo"
)

// commands lists every leasectl command, in help order.
var commands = []*command{
	{name: "acquire", args: "RESOURCE", minArgs: 1, maxArgs: 1, required: []string{"ttl"},
		summary: "acquire a lease with a fencing token; refused while the resource is held, unless --wait",
		setup:   setupAcquire},
	{name: "renew", args: "LEASE_ID", minArgs: 1, maxArgs: 1,
		summary: "extend a live lease by its ttl, keeping its token",
		setup:   setupRenew},
	{name: "release", args: "LEASE_ID", minArgs: 1, maxArgs: 1,
		summary: "release a lease; an unknown or expired id prints \"released false\" and exits 0 (release is idempotent)",
		setup:   setupRelease},
	{name: "get", args: "RESOURCE", minArgs: 1, maxArgs: 1,
		summary: "show the current lease of a resource (linearizable unless --stale)",
		setup:   setupGet},
	{name: "watch", args: "RESOURCE_OR_PREFIX", minArgs: 1, maxArgs: 1,
		summary: "stream lease events, one per line, until interrupted; reconnects without gaps",
		setup:   setupWatch},
	{name: "status", minArgs: 0, maxArgs: 0,
		summary: "show leader, term, indexes, members, live leases and clock settings",
		setup:   setupStatus},
	{name: "members list", minArgs: 0, maxArgs: 0,
		summary: "list cluster members with suffrage and the leader",
		setup:   setupMembersList},
	{name: "members add", args: "ID ADDR", minArgs: 2, maxArgs: 2,
		summary: "add a node as a voter (or --nonvoter)",
		setup:   setupMembersAdd},
	{name: "members remove", args: "ID", minArgs: 1, maxArgs: 1,
		summary: "remove a node",
		setup:   setupMembersRemove},
	{name: "transfer-leadership", args: "[ID]", minArgs: 0, maxArgs: 1,
		summary: "ask the leader to hand over leadership, to ID when given",
		setup:   setupTransfer},
	{name: "snapshot save", args: "FILE", minArgs: 1, maxArgs: 1,
		summary: "save a consistent backup of the lease state (checksummed); leased --restore starts a new cluster from it",
		setup:   setupSnapshotSave},
	{name: "version", minArgs: 0, maxArgs: 0,
		summary: "print leasectl's version, the commit it was built from and its Go version",
		setup:   setupVersion},
	{name: "help", args: "[COMMAND]", minArgs: 0, maxArgs: 2,
		summary: "show help"},
}

// annotatedError carries, with a failed call's error, extra fields for the
// JSON error object and a note for stderr.
type annotatedError struct {
	err    error
	fields map[string]any
	note   string
}

func (e *annotatedError) Error() string { return e.err.Error() }
func (e *annotatedError) Unwrap() error { return e.err }

func (a *app) defaultHolder() string {
	if h, err := a.hostname(); err == nil && h != "" {
		return "leasectl@" + h
	}
	return "leasectl"
}

func setupAcquire(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	ttl := fs.Duration("ttl", 0, "lease time to live, e.g. 10s (required)")
	scope := fs.String("scope", "", "fencing `SCOPE` to draw the token from (default: the resource name)")
	holder := fs.String("holder", "", "`LABEL` naming the holder for humans and logs (default leasectl@HOSTNAME)")
	wait := &a.unbounded // a waiting acquire has no default bound
	fs.BoolVar(wait, "wait", false, "queue until the resource is free; only an explicit --timeout bounds the wait, Ctrl-C cancels")
	requestID := fs.String("request-id", "", "request `ID` for safe retries: one id yields at most one lease (default: 16 random bytes in hex)")
	return func(ctx context.Context, args []string) error {
		if *ttl <= 0 {
			return usageErrorf("--ttl is required and must be positive")
		}
		id := *requestID
		if id == "" {
			id = client.NewRequestID()
		}
		h := *holder
		if h == "" {
			h = a.defaultHolder()
		}
		// One request, one request id, on every attempt: a retry on another
		// node after a lost answer returns the first grant (replayed), never
		// a second lease.
		req := &api.AcquireRequest{
			Resource:  args[0],
			Scope:     *scope,
			Holder:    h,
			Ttl:       durationpb.New(*ttl),
			RequestId: id,
			Wait:      *wait,
		}
		opts := []client.InvokeOption{client.Mutation()}
		if *wait {
			opts = append(opts, client.NoAttemptTimeout())
			a.sayWaiting(ctx, req.GetResource())
		}
		resp, _, err := rpc(ctx, a, api.NewLeaseServiceClient, api.LeaseServiceClient.Acquire, req, opts...)
		if err != nil {
			err = withValues(err, map[string]string{"resource": args[0], "scope": *scope, "holder": h, "ttl": ttl.String(), "request_id": id})
			ae := &annotatedError{err: err, fields: map[string]any{"request_id": id}}
			unknown := errors.Is(err, client.ErrIndeterminate)
			if *wait && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// --timeout ended the wait, not the cluster.
				ae.err, unknown = a.waitTimedOut(ctx, req, err, ae.fields)
			}
			if unknown {
				ae.note = "leasectl: retry with the same request id; it returns the first outcome, never a second lease:\n  " +
					retryCommand(fs, a.args, id, *requestID == "")
			}
			return ae
		}
		a.printLease(resp.GetLease(), asDuration(resp.GetTtlRemaining()), resp.GetReplayed(), id)
		return nil
	}
}

// sayWaiting tells, before an acquire --wait, who holds the resource and
// how many callers wait ahead. It says nothing when the resource is free or
// cannot be read within a second: the wait itself is what matters.
func (a *app) sayWaiting(ctx context.Context, resource string) {
	gctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	g, _, err := rpc(gctx, a, api.NewLeaseServiceClient, api.LeaseServiceClient.Get, &api.GetRequest{Resource: resource})
	l := g.GetLease()
	if err != nil || l == nil {
		return
	}
	fmt.Fprintf(a.stderr, "leasectl: waiting for %s: held by %s (token %d), time left %s, %d waiting ahead; Ctrl-C to stop\n",
		resource, l.GetHolder(), l.GetToken(), roundDuration(asDuration(g.GetTtlRemaining())), g.GetWaiters())
}

// waitTimedOut builds the error of an acquire --wait that --timeout ended,
// saying who holds the resource now (a fresh read, after the command's
// deadline), and adds the lease to fields. It reports whether the outcome is
// still unknown: the grant may have come as the deadline passed unless the
// resource is now free or held under another holder label.
func (a *app) waitTimedOut(ctx context.Context, req *api.AcquireRequest, err error, fields map[string]any) (error, bool) {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	e := &waitTimeoutError{resource: req.GetResource(), after: a.timeout, err: err}
	g, _, gerr := rpc(gctx, a, api.NewLeaseServiceClient, api.LeaseServiceClient.Get, &api.GetRequest{Resource: req.GetResource()})
	if gerr != nil {
		return e, true
	}
	e.read, e.lease, e.left = true, g.GetLease(), asDuration(g.GetTtlRemaining())
	if l := e.lease; l != nil {
		fields["resource"], fields["holder"], fields["token"] = l.GetResource(), l.GetHolder(), l.GetToken()
		fields["time_left"] = roundDuration(e.left)
		return e, l.GetHolder() == req.GetHolder()
	}
	return e, false
}

// waitTimeoutError: acquire --wait ran out of its --timeout while the
// resource stayed held.
type waitTimeoutError struct {
	resource string
	after    time.Duration
	read     bool       // the resource could be read after the timeout
	lease    *api.Lease // the lease that held it then; nil when free
	left     time.Duration
	err      error // the call's error
}

func (e *waitTimeoutError) Error() string {
	msg := fmt.Sprintf("timed out waiting for %s after %v", e.resource, e.after)
	switch {
	case e.lease != nil:
		msg += fmt.Sprintf("; held by %s (token %d), time left %s", e.lease.GetHolder(), e.lease.GetToken(), roundDuration(e.left))
	case e.read:
		msg += "; it is free now"
	}
	return msg
}

func (e *waitTimeoutError) Unwrap() error { return e.err }

func setupVersion(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return func(context.Context, []string) error {
		b := buildinfo.From(a.buildInfo()) // the same source as leased --version
		if a.json {
			a.printJSON(map[string]any{"version": b.Version, "commit": b.Commit, "modified": b.Modified, "go": b.Go})
			return nil
		}
		fmt.Fprint(a.stdout, b.Text())
		return nil
	}
}

func setupRenew(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		id, err := parseLeaseID(args[0])
		if err != nil {
			return err
		}
		resp, _, err := rpc(ctx, a, api.NewLeaseServiceClient, api.LeaseServiceClient.Renew, &api.RenewRequest{LeaseId: id}, client.Mutation())
		if err != nil {
			return err
		}
		a.printLease(resp.GetLease(), asDuration(resp.GetTtlRemaining()), false, "")
		return nil
	}
}

func setupRelease(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		id, err := parseLeaseID(args[0])
		if err != nil {
			return err
		}
		attempts := 0
		countAttempts := func(c api.LeaseServiceClient, ctx context.Context, r *api.ReleaseRequest, o ...grpc.CallOption) (*api.ReleaseResponse, error) {
			attempts++
			return c.Release(ctx, r, o...)
		}
		resp, _, err := rpc(ctx, a, api.NewLeaseServiceClient, countAttempts, &api.ReleaseRequest{LeaseId: id}, client.Mutation())
		if err != nil {
			return err
		}
		if a.json {
			a.printJSON(releaseResult{Released: resp.GetReleased(), Lease: viewLease(resp.GetLease())})
		} else {
			k := newKV(a.stdout)
			k.row("released", resp.GetReleased())
			if l := resp.GetLease(); l != nil {
				k.row("lease", api.FormatLeaseID(l.GetId()))
				k.row("resource", l.GetResource())
				k.row("token", l.GetToken())
			}
			k.flush()
		}
		if !resp.GetReleased() && attempts > 1 {
			// Release is idempotent, so an earlier attempt whose answer was
			// lost may have been the one that released it.
			fmt.Fprintln(a.stderr, "leasectl: an earlier attempt failed in flight and may have released the lease")
		}
		return nil
	}
}

func setupGet(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	stale := fs.Bool("stale", false, "answer from the first reachable node without confirming leadership")
	return func(ctx context.Context, args []string) error {
		resp, _, err := rpc(ctx, a, api.NewLeaseServiceClient, api.LeaseServiceClient.Get, &api.GetRequest{Resource: args[0], Stale: *stale})
		if err != nil {
			return err
		}
		l := resp.GetLease()
		left := asDuration(resp.GetTtlRemaining())
		if a.json {
			res := getResult{Resource: args[0], Held: l != nil, Lease: viewLease(l),
				ScopeToken: resp.GetScopeToken(), AppliedIndex: resp.GetAppliedIndex(),
				Stale: resp.GetStale(), Node: resp.GetNodeId()}
			if l != nil {
				res.TimeLeft = roundDuration(left)
			}
			a.printJSON(res)
			return nil
		}
		k := newKV(a.stdout)
		if l == nil {
			k.row("resource", args[0])
			k.row("state", "free")
		} else {
			k.row("state", "held")
			k.lease(l)
			k.row("time left", roundDuration(left))
		}
		k.row("scope token", resp.GetScopeToken())
		k.row("applied", resp.GetAppliedIndex())
		if resp.GetStale() {
			k.row("stale", fmt.Sprintf("yes: %s's local state at index %d, may lag the leader", resp.GetNodeId(), resp.GetAppliedIndex()))
		}
		k.flush()
		return nil
	}
}

// status calls ClusterService.Status on the first node that answers.
func (a *app) status(ctx context.Context) (*api.StatusResponse, string, error) {
	return rpc(ctx, a, api.NewClusterServiceClient, api.ClusterServiceClient.Status, &api.StatusRequest{})
}

func setupStatus(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		s, addr, err := a.status(ctx)
		if err != nil {
			return err
		}
		skew := fmtNanos(s.GetSkewMarginNs())
		tick := fmtNanos(s.GetTickNs())
		if a.json {
			a.printJSON(statusResult{
				AnsweredBy: addr, ID: s.GetId(), Addr: s.GetAddr(), State: s.GetState(),
				LeaderID: s.GetLeaderId(), LeaderAddr: s.GetLeaderAddr(), Term: s.GetTerm(),
				CommitIndex: s.GetCommitIndex(), AppliedIndex: s.GetAppliedIndex(),
				LastLogIndex: s.GetLastLogIndex(), Members: viewMembers(s.GetMembers()),
				LiveLeases: s.GetLiveLeases(), ClusterTimeNs: s.GetClusterTimeNs(),
				SkewMargin: skew, Drift: s.GetDrift(), Tick: tick, Version: s.GetVersion(),
				Unsafe: s.GetUnsafe(), TokenFloor: s.GetTokenFloor(), Served: s.GetServed(), VotesHeld: s.GetVotesHeld(), StateCorrupt: s.GetStateCorrupt(),
			})
			return nil
		}
		leader := "none known"
		if s.GetLeaderId() != "" || s.GetLeaderAddr() != "" {
			leader = fmt.Sprintf("%s (%s)", s.GetLeaderId(), s.GetLeaderAddr())
		}
		k := newKV(a.stdout)
		k.row("node", fmt.Sprintf("%s (%s) %s", s.GetId(), s.GetAddr(), s.GetState()))
		// Status is each node's own view: only the leader's is current.
		if s.GetState() == "leader" {
			k.row("view", s.GetId()+"'s own, the leader's")
		} else {
			k.row("view", s.GetId()+"'s own, as a "+s.GetState()+": it may lag the leader's")
		}
		k.row("leader", leader)
		k.row("term", s.GetTerm())
		k.row("commit index", s.GetCommitIndex())
		k.row("applied index", s.GetAppliedIndex())
		k.row("last log index", s.GetLastLogIndex())
		k.row("live leases", s.GetLiveLeases())
		if f := s.GetTokenFloor(); f > 0 { // raised by a restore from a backup
			k.row("token floor", f)
		}
		if sv := s.GetServed(); len(sv) > 0 {
			// A wiped node started again under one of these ids is refused.
			k.row("served", strings.Join(sv, ", "))
		}
		if s.GetVotesHeld() {
			// A founder started on an empty data dir that could not yet
			// learn whether it served before (docs/OPERATIONS.md).
			k.row("votes held", "until its founders answer whether it served in this cluster before")
		}
		k.row("skew margin", skew)
		k.row("drift", strconv.FormatFloat(s.GetDrift(), 'g', -1, 64))
		k.row("tick", tick)
		k.row("version", s.GetVersion())
		if u := s.GetUnsafe(); len(u) > 0 {
			// Each enabled by an explicit flag on the node answering.
			k.row("unsafe", strings.Join(u, ", "))
		}
		if c := s.GetStateCorrupt(); c != "" {
			// The node serves nothing until replaced (docs/OPERATIONS.md).
			k.row("STATE CORRUPT", c+"; replace this node")
		}
		k.flush()
		fmt.Fprintln(a.stdout, "members")
		a.printMembers(s.GetMembers(), "  ")
		return nil
	}
}

// fmtNanos formats a configured duration exactly (500ms, 1s).
func fmtNanos(ns int64) string {
	return time.Duration(ns).String()
}

func (a *app) printMembers(ms []*api.Member, indent string) {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%sID\tADDRESS\tSUFFRAGE\t\n", indent)
	for _, m := range ms {
		mark := ""
		if m.GetLeader() {
			mark = "leader"
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\n", indent, m.GetId(), m.GetAddr(), m.GetSuffrage(), mark)
	}
	tw.Flush()
	for _, line := range strings.SplitAfter(buf.String(), "\n") {
		if line != "" {
			fmt.Fprintln(a.stdout, strings.TrimRight(line, " \n"))
		}
	}
}

func setupMembersList(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		s, _, err := a.status(ctx)
		if err != nil {
			return err
		}
		if a.json {
			a.printJSON(map[string]any{"members": viewMembers(s.GetMembers())})
			return nil
		}
		a.printMembers(s.GetMembers(), "")
		return nil
	}
}

func setupMembersAdd(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	nonvoter := fs.Bool("nonvoter", false, "add the node as a nonvoter (replicates, does not vote)")
	return func(ctx context.Context, args []string) error {
		req := &api.JoinRequest{Id: args[0], Addr: args[1], Nonvoter: *nonvoter}
		// No per-attempt bound: the leader probes the new member (up to
		// 2 s) and commits the configuration before it answers, longer
		// than the client's 1.2 s bound for spotting a silent node.
		_, _, err := rpc(ctx, a, api.NewClusterServiceClient, api.ClusterServiceClient.Join, req, client.Mutation(), client.NoAttemptTimeout())
		if err != nil {
			return err
		}
		if !answers(ctx, args[1]) {
			consequence := "until a node runs there, it counts against the quorum"
			if *nonvoter {
				consequence = "it replicates nothing until a node runs there"
			}
			fmt.Fprintf(a.stderr, "leasectl: warning: nothing answers at %s: %s\n", args[1], consequence)
		}
		suffrage := "voter"
		if *nonvoter {
			suffrage = "nonvoter"
		}
		if a.json {
			a.printJSON(map[string]any{"added": args[0], "addr": args[1], "suffrage": suffrage})
		} else {
			fmt.Fprintf(a.stdout, "added %s (%s) as %s\n", args[0], args[1], suffrage)
		}
		return nil
	}
}

// answers reports whether something accepts a connection at addr within a
// second.
func answers(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func setupMembersRemove(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		_, _, err := rpc(ctx, a, api.NewClusterServiceClient, api.ClusterServiceClient.Remove, &api.RemoveRequest{Id: args[0]}, client.Mutation(), client.NoAttemptTimeout())
		if err != nil {
			return err
		}
		if a.json {
			a.printJSON(map[string]any{"removed": args[0]})
		} else {
			fmt.Fprintf(a.stdout, "removed %s\n", args[0])
		}
		return nil
	}
}

func setupTransfer(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		req := &api.TransferLeadershipRequest{}
		if len(args) == 1 {
			req.Id = args[0]
		}
		prev := ""
		if st, _, err := a.status(ctx); err == nil {
			prev = st.GetLeaderId()
		}
		resp, _, err := rpc(ctx, a, api.NewClusterServiceClient, api.ClusterServiceClient.TransferLeadership, req, client.Mutation(), client.NoAttemptTimeout())
		if err != nil {
			return err
		}
		id, addr := a.newLeader(ctx, resp.GetLeaderId(), prev, req.GetId())
		switch {
		case a.json:
			a.printJSON(map[string]any{"leader_id": id, "leader_addr": addr})
		case id == "":
			fmt.Fprintln(a.stdout, "leadership handed over; no node knows the new leader yet (see leasectl status)")
		case addr == "":
			fmt.Fprintf(a.stdout, "leader now %s\n", id)
		default:
			fmt.Fprintf(a.stdout, "leader now %s (%s)\n", id, addr)
		}
		return nil
	}
}

// newLeader returns the leader after a transfer, with its address: the one
// the answer named, else the first one a node reports that is the target
// (when one was asked for) or another than prev. The old leader answers
// before it has heard from the new one, so its answer often names none;
// newLeader asks the cluster until one is known, for up to 10s or until ctx
// ends, and returns "" when none is.
func (a *app) newLeader(ctx context.Context, named, prev, target string) (id, addr string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	wanted := func(id string) bool {
		if target != "" {
			return id == target
		}
		return id != "" && id != prev
	}
	id = named
	for {
		if st, _, err := a.status(ctx); err == nil {
			if !wanted(id) && wanted(st.GetLeaderId()) {
				id = st.GetLeaderId()
			}
			if wanted(id) {
				for _, m := range st.GetMembers() {
					if m.GetId() == id {
						addr = m.GetAddr()
					}
				}
				return id, addr
			}
		}
		select {
		case <-ctx.Done():
			if wanted(id) {
				return id, ""
			}
			return "", ""
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func setupSnapshotSave(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	a.unbounded = true // a large download may take long
	return func(ctx context.Context, args []string) error {
		path := args[0]
		var (
			data  []byte
			last  *api.SnapshotChunk
			index uint64
		)
		err := a.cl.Invoke(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
			data, last = data[:0], nil // a retry starts the download over
			s, err := api.NewClusterServiceClient(conn).Snapshot(ctx, &api.SnapshotRequest{})
			if err != nil {
				return err
			}
			for {
				c, err := s.Recv()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				data = append(data, c.Data...)
				index = c.Index
				if c.Sha256 != "" {
					last = c
				}
			}
		}, client.NoAttemptTimeout())
		if err != nil {
			return err
		}
		if last == nil || len(data) < sha256.Size || uint64(len(data)) != last.Size {
			return fmt.Errorf("snapshot stream ended early (%d bytes)", len(data))
		}
		sum := sha256.Sum256(data[:len(data)-sha256.Size])
		if hex.EncodeToString(sum[:]) != last.Sha256 || !bytes.Equal(sum[:], data[len(data)-sha256.Size:]) {
			return fmt.Errorf("snapshot checksum mismatch: the download is corrupt")
		}
		if err := saveSynced(path, data); err != nil {
			return err
		}
		if a.json {
			a.printJSON(map[string]any{"file": path, "bytes": len(data), "index": index, "sha256": last.Sha256})
		} else {
			fmt.Fprintf(a.stdout, "saved %s: %d bytes at index %d, sha256 %s\n", path, len(data), index, last.Sha256)
		}
		return nil
	}
}

// saveSynced writes data to path.part, syncs it, renames it to path and
// syncs the directory: once "saved" is printed, a crash or power loss
// leaves the whole backup under its name, not an empty or partial file
// (a restore would refuse that by its checksum, but the backup would be
// lost).
func saveSynced(path string, data []byte) error {
	tmp := path + ".part"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
