package checker

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasefence/leasefence/jepsen/history"
)

// NameLinearizable is the porcupine checker (property 6).
const NameLinearizable = "lease-linearizable"

// AnomalyNotLinearizable names a history no order of the lease model
// explains.
const AnomalyNotLinearizable = "not-linearizable"

// LinPrefix starts the resources of the linearizability workload.
const LinPrefix = "jl/"

// linState is the lease model's state of one resource: its holder's lease
// id ("" when free; "?op" for a lease an unknown acquire may have been
// granted, whose id nobody saw yet) and the scope's highest token. Expiry
// is out of the model: the workload's leases live longer than the run.
type linState struct {
	holder  string
	counter uint64
}

type linInput struct {
	kind  string // acquire, release, read
	op    string
	lease string // renew, release: the lease named
	token uint64 // renew, release: that lease's token
}

type linOutput struct {
	result string // ok, fail, unknown
	held   bool   // acquire refused as held
	token  uint64 // acquire: the token; read: the scope's highest token
	lease  string // acquire: the lease granted; read: the holder ("" free)
	// released is Released or NotReleased when the node said which (a
	// release made through the API directly), else "".
	released string
}

// LeaseModel is the owner-aware lease model, nondeterministic over
// operations whose outcome is unknown.
func LeaseModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{linState{}} },
		Step: func(st, in, out interface{}) []interface{} {
			s, i, o := st.(linState), in.(linInput), out.(linOutput)
			free := s.holder == ""
			// A lease is its id and its token: two grants with one id are
			// two leases (a holder of the first must not act on the second).
			holds := !free && s.holder == i.lease && (i.token == 0 || i.token == s.counter)
			switch i.kind {
			case history.OpAcquire:
				switch {
				case o.result == history.OK:
					if free && o.token == s.counter+1 {
						return []interface{}{linState{o.lease, o.token}}
					}
					return nil
				case o.result == history.Fail && o.held:
					if !free {
						return []interface{}{s}
					}
					return nil
				default: // unknown (or another refusal): granted or not
					if free {
						return []interface{}{s, linState{"?" + i.op, s.counter + 1}}
					}
					return []interface{}{s}
				}
			case history.OpRenew: // expiry is out of the model: renewal changes nothing
				switch o.result {
				case history.OK:
					if holds {
						return []interface{}{s}
					}
					return nil
				case history.Fail: // NotFound
					if !holds {
						return []interface{}{s}
					}
					return nil
				}
				return []interface{}{s}
			case history.OpRelease:
				switch {
				case o.result == history.OK && o.released == history.Released:
					if holds {
						return []interface{}{linState{"", s.counter}}
					}
					return nil
				case o.result == history.OK && o.released == history.NotReleased:
					if !holds {
						return []interface{}{s}
					}
					return nil
				case !holds:
					return []interface{}{s}
				case o.result == history.OK:
					return []interface{}{linState{"", s.counter}}
				}
				return []interface{}{s, linState{"", s.counter}}
			case history.OpRead:
				if o.result != history.OK {
					return []interface{}{s}
				}
				if o.token != s.counter {
					return nil
				}
				switch {
				case o.lease == s.holder:
					return []interface{}{s}
				case o.lease != "" && strings.HasPrefix(s.holder, "?"):
					return []interface{}{linState{o.lease, s.counter}} // now we know its id
				}
				return nil
			}
			return nil
		},
		DescribeOperation: func(in, out interface{}) string {
			i, o := in.(linInput), out.(linOutput)
			switch i.kind {
			case history.OpAcquire:
				if o.result == history.OK {
					return fmt.Sprintf("acquire → token %d lease %s", o.token, short(o.lease))
				}
				if o.held {
					return "acquire → held"
				}
				return "acquire → " + o.result
			case history.OpRelease:
				if o.released != "" {
					return fmt.Sprintf("release %s (token %d) → %s", short(i.lease), i.token, o.released)
				}
				return fmt.Sprintf("release %s (token %d) → %s", short(i.lease), i.token, o.result)
			case history.OpRenew:
				return fmt.Sprintf("renew %s → %s", short(i.lease), o.result)
			}
			if o.result != history.OK {
				return "read → " + o.result
			}
			return fmt.Sprintf("read → holder %q, scope token %d", short(o.lease), o.token)
		},
		DescribeOperationMetadata: func(m interface{}) string {
			if m, ok := m.(linMeta); ok {
				return fmt.Sprintf("%s, worker %s, op %s", m.resource, m.worker, m.op)
			}
			return ""
		},
		DescribeState: func(st interface{}) string {
			s := st.(linState)
			return fmt.Sprintf("holder %q, counter %d", short(s.holder), s.counter)
		},
	}
	return nm.ToModel()
}

// linMeta is an operation's Metadata: where it came from in the history
// (shown by porcupine's visualization; the model never reads it).
type linMeta struct{ resource, worker, op string }

// LinOperations turns the linearizability workload's records (resources
// under LinPrefix) into porcupine operations, one partition per resource.
// An operation whose outcome is unknown never returns (Return = +inf):
// its effect, if any, may land at any time after its call. An acquire
// resolved from the Raft logs (ResolvedFrom) keeps its known outcome but
// never returns either; one resolved as not applied is left out.
func LinOperations(h []history.Record) map[string][]porcupine.Operation {
	inv := map[string]history.Record{}
	clients := map[string]int{}
	out := map[string][]porcupine.Operation{}
	add := func(res string, op porcupine.Operation) { out[res] = append(out[res], op) }
	for _, r := range h {
		if !strings.HasPrefix(r.Resource, LinPrefix) || r.Worker == "" || r.Type == history.OpEvent {
			continue
		}
		if _, ok := clients[r.Worker]; !ok {
			clients[r.Worker] = len(clients)
		}
		switch r.Kind {
		case history.Invoke:
			inv[r.Op] = r
		case history.Complete:
			i, ok := inv[r.Op]
			if !ok {
				continue
			}
			delete(inv, r.Op)
			if r.ResolvedFrom != "" && r.Type == history.OpAcquire && r.Result == history.Fail {
				continue // known not applied: no effect, nothing observed
			}
			in := linInput{kind: r.Type, op: r.Op, lease: i.Lease, token: i.Token}
			o := linOutput{result: r.Result, held: strings.HasPrefix(r.Error, history.HeldPrefix), token: r.Token, lease: r.Lease}
			if r.Type == history.OpRelease {
				o.released = r.Value
			}
			ret := r.TimeNs
			if r.Result == history.Unknown || r.ResolvedFrom != "" || (r.Type == history.OpAcquire && r.Result == history.Fail && !o.held) {
				ret = math.MaxInt64
			}
			add(r.Resource, porcupine.Operation{ClientId: clients[r.Worker], Input: in, Call: i.TimeNs, Output: o, Return: ret,
				Metadata: linMeta{r.Resource, r.Worker, r.Op}})
		}
	}
	// Invoked, never completed (the worker was stopped): unknown.
	for _, i := range inv {
		add(i.Resource, porcupine.Operation{ClientId: clients[i.Worker], Input: linInput{kind: i.Type, op: i.Op, lease: i.Lease, token: i.Token},
			Call: i.TimeNs, Output: linOutput{result: history.Unknown}, Return: math.MaxInt64, Metadata: linMeta{i.Resource, i.Worker, i.Op}})
	}
	return out
}

// CheckLinearizable is property 6: per resource of the linearizability
// workload, the history of acquires, releases and reads is linearizable
// against LeaseModel. A check that times out is unknown.
func CheckLinearizable(h []history.Record, timeout time.Duration) Result {
	f := NewFinding(NameLinearizable)
	parts := LinOperations(h)
	res := make([]string, 0, len(parts))
	for r := range parts {
		res = append(res, r)
	}
	sort.Strings(res)
	model := LeaseModel()
	for _, r := range res {
		ops := parts[r]
		f.R.Checked += len(ops)
		result, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
		switch result {
		case porcupine.Illegal:
			f.Invalid(AnomalyNotLinearizable, "resource %q: %d operations have no linearization; longest prefix: %s", r, len(ops), longestPrefix(model, ops, info))
		case porcupine.Unknown:
			f.Unknown("resource %q: linearizability check timed out after %v over %d operations", r, timeout, len(ops))
		}
	}
	return f.Done("operation of the linearizability workload")
}

// longestPrefix describes the end of the longest partial linearization.
func longestPrefix(model porcupine.Model, ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	parts := info.PartialLinearizations()
	var best []int
	for _, p := range parts {
		for _, l := range p {
			if len(l) > len(best) {
				best = l
			}
		}
	}
	if len(best) == 0 {
		return "none"
	}
	from := len(best) - 3
	if from < 0 {
		from = 0
	}
	var s []string
	for _, idx := range best[from:] {
		if idx < len(ops) {
			s = append(s, model.DescribeOperation(ops[idx].Input, ops[idx].Output))
		}
	}
	return fmt.Sprintf("%d ops, ending %s", len(best), strings.Join(s, "; "))
}

// LinearizabilityInfo checks the linearizability workload of h again, all
// its resources in one porcupine call (one partition per resource, in
// resource order), and keeps what porcupine found: the full linearization
// of each partition that has one, the longest partial ones otherwise. The
// verdict of the checker stays CheckLinearizable's (per resource, each
// with its own timeout); this exists for the visualization, and costs a
// second check. The model it returns is the one to visualize with.
func LinearizabilityInfo(h []history.Record, timeout time.Duration) (porcupine.Model, porcupine.CheckResult, porcupine.LinearizationInfo) {
	parts := LinOperations(h)
	res := make([]string, 0, len(parts))
	for r := range parts {
		res = append(res, r)
	}
	sort.Strings(res)
	var all []porcupine.Operation
	for _, r := range res {
		all = append(all, parts[r]...)
	}
	model := LeaseModel()
	model.Partition = func(ops []porcupine.Operation) [][]porcupine.Operation {
		idx := map[string]int{}
		var out [][]porcupine.Operation
		for _, op := range ops {
			r := op.Metadata.(linMeta).resource
			i, ok := idx[r]
			if !ok {
				i = len(out)
				idx[r] = i
				out = append(out, nil)
			}
			out[i] = append(out[i], op)
		}
		return out
	}
	result, info := porcupine.CheckOperationsVerbose(model, all, timeout)
	return model, result, info
}
