package ctl

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
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
		summary: "release a lease; an unknown or expired id prints \"released false\"",
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

// newRequestID returns 16 random bytes in hex.
func newRequestID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

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
	wait := fs.Bool("wait", false, "queue until the resource is free; only an explicit --timeout bounds the wait, Ctrl-C cancels")
	requestID := fs.String("request-id", "", "request `ID` for safe retries: one id yields at most one lease (default: 16 random bytes in hex)")
	return func(ctx context.Context, args []string) error {
		if *ttl <= 0 {
			return usageErrorf("--ttl is required and must be positive")
		}
		id := *requestID
		if id == "" {
			id = newRequestID()
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
		cctx, cancel := a.commandContext(ctx, *wait)
		defer cancel()
		var resp *api.AcquireResponse
		_, err := a.cl.call(cctx, func(ctx context.Context, _ string, cc grpc.ClientConnInterface) error {
			r, err := api.NewLeaseServiceClient(cc).Acquire(ctx, req)
			resp = r
			return err
		})
		if err != nil {
			ae := &annotatedError{err: err, fields: map[string]any{"request_id": id}}
			switch status.Code(err) {
			case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal:
				ae.note = fmt.Sprintf("leasectl: the outcome is unknown; `leasectl acquire %s --ttl %s --request-id %s` returns it without a second lease",
					args[0], *ttl, id)
			}
			return ae
		}
		a.printLease(resp.GetLease(), asDuration(resp.GetTtlRemaining()), resp.GetReplayed(), id)
		return nil
	}
}

func setupRenew(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		id, err := parseLeaseID(args[0])
		if err != nil {
			return err
		}
		cctx, cancel := a.commandContext(ctx, false)
		defer cancel()
		var resp *api.RenewResponse
		_, err = a.cl.call(cctx, func(ctx context.Context, _ string, cc grpc.ClientConnInterface) error {
			r, err := api.NewLeaseServiceClient(cc).Renew(ctx, &api.RenewRequest{LeaseId: id})
			resp = r
			return err
		})
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
		cctx, cancel := a.commandContext(ctx, false)
		defer cancel()
		var resp *api.ReleaseResponse
		attempts := 0
		_, err = a.cl.call(cctx, func(ctx context.Context, _ string, cc grpc.ClientConnInterface) error {
			attempts++
			r, err := api.NewLeaseServiceClient(cc).Release(ctx, &api.ReleaseRequest{LeaseId: id})
			resp = r
			return err
		})
		if err != nil {
			return err
		}
		if a.json {
			a.printJSON(releaseResult{Released: resp.GetReleased(), Lease: viewLease(resp.GetLease())})
		} else {
			k := newKV(a.stdout)
			k.row("released", resp.GetReleased())
			if l := resp.GetLease(); l != nil {
				k.row("lease", hex.EncodeToString(l.GetId()))
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
		cctx, cancel := a.commandContext(ctx, false)
		defer cancel()
		var resp *api.GetResponse
		_, err := a.cl.call(cctx, func(ctx context.Context, _ string, cc grpc.ClientConnInterface) error {
			r, err := api.NewLeaseServiceClient(cc).Get(ctx, &api.GetRequest{Resource: args[0], Stale: *stale})
			resp = r
			return err
		})
		if err != nil {
			return err
		}
		l := resp.GetLease()
		left := asDuration(resp.GetTtlRemaining())
		if a.json {
			res := getResult{Resource: args[0], Held: l != nil, Lease: viewLease(l),
				ScopeToken: resp.GetScopeToken(), AppliedIndex: resp.GetAppliedIndex()}
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
		k.flush()
		return nil
	}
}

// status calls ClusterService.Status on the first node that answers.
func (a *app) status(ctx context.Context) (*api.StatusResponse, string, error) {
	cctx, cancel := a.commandContext(ctx, false)
	defer cancel()
	var resp *api.StatusResponse
	addr, err := a.cl.call(cctx, func(ctx context.Context, _ string, cc grpc.ClientConnInterface) error {
		r, err := api.NewClusterServiceClient(cc).Status(ctx, &api.StatusRequest{})
		resp = r
		return err
	})
	return resp, addr, err
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
				Unsafe: s.GetUnsafe(), StateCorrupt: s.GetStateCorrupt(),
			})
			return nil
		}
		leader := "none known"
		if s.GetLeaderId() != "" || s.GetLeaderAddr() != "" {
			leader = fmt.Sprintf("%s (%s)", s.GetLeaderId(), s.GetLeaderAddr())
		}
		k := newKV(a.stdout)
		k.row("node", fmt.Sprintf("%s (%s) %s", s.GetId(), s.GetAddr(), s.GetState()))
		k.row("leader", leader)
		k.row("term", s.GetTerm())
		k.row("commit index", s.GetCommitIndex())
		k.row("applied index", s.GetAppliedIndex())
		k.row("last log index", s.GetLastLogIndex())
		k.row("live leases", s.GetLiveLeases())
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
		cctx, cancel := a.commandContext(ctx, false)
		defer cancel()
		req := &api.JoinRequest{Id: args[0], Addr: args[1], Nonvoter: *nonvoter}
		_, err := a.cl.call(cctx, func(ctx context.Context, _ string, cc grpc.ClientConnInterface) error {
			_, err := api.NewClusterServiceClient(cc).Join(ctx, req)
			return err
		})
		if err != nil {
			return err
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

func setupMembersRemove(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		cctx, cancel := a.commandContext(ctx, false)
		defer cancel()
		_, err := a.cl.call(cctx, func(ctx context.Context, _ string, cc grpc.ClientConnInterface) error {
			_, err := api.NewClusterServiceClient(cc).Remove(ctx, &api.RemoveRequest{Id: args[0]})
			return err
		})
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
		cctx, cancel := a.commandContext(ctx, false)
		defer cancel()
		var resp *api.TransferLeadershipResponse
		_, err := a.cl.call(cctx, func(ctx context.Context, _ string, cc grpc.ClientConnInterface) error {
			r, err := api.NewClusterServiceClient(cc).TransferLeadership(ctx, req)
			resp = r
			return err
		})
		if err != nil {
			return err
		}
		if a.json {
			a.printJSON(map[string]any{"leader_id": resp.GetLeaderId()})
		} else {
			fmt.Fprintf(a.stdout, "leader now %s\n", resp.GetLeaderId())
		}
		return nil
	}
}

func setupSnapshotSave(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		path := args[0]
		cctx, cancel := a.commandContext(ctx, true)
		defer cancel()
		var (
			data  []byte
			last  *api.SnapshotChunk
			index uint64
		)
		_, err := a.cl.call(cctx, func(ctx context.Context, _ string, cc grpc.ClientConnInterface) error {
			data, last = data[:0], nil // a retry starts the download over
			s, err := api.NewClusterServiceClient(cc).Snapshot(ctx, &api.SnapshotRequest{})
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
		})
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
		tmp := path + ".part"
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
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
