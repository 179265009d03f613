package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// model is a deliberately naive reference for the lease rules of DESIGN.md:
// linear scans, no heap, no indexes.
type model struct {
	now      int64
	leases   []Lease // at most one per resource
	counters map[string]uint64
	dedup    map[string]dedupModel
	seq      int
}

// dedupModel is a request id's first outcome: its lease, or refused (the
// lease is then the holder's), with the request it answered.
type dedupModel struct {
	at      int64
	seq     int // order of making, for the oldest-first eviction
	lease   Lease
	refused bool
	req     reqModel
}

// reqModel is what a request id names: the request's parameters.
type reqModel struct {
	resource, scope, holder string
	ttl                     int64
	wait                    bool
}

func newModel() *model {
	return &model{counters: map[string]uint64{}, dedup: map[string]dedupModel{}}
}

func (m *model) find(pred func(Lease) bool) int {
	for i, l := range m.leases {
		if pred(l) {
			return i
		}
	}
	return -1
}

func (m *model) rem(l Lease) time.Duration {
	if l.ExpiresAt <= m.now {
		return 0
	}
	return time.Duration(l.ExpiresAt - m.now)
}

// stamp applies a batch's stamp: cluster time never runs backwards.
func (m *model) stamp(now int64) {
	if now > m.now {
		m.now = now
	}
}

// modelParams are a batch's parameters as the model reads them.
type modelParams struct {
	margin, keep, refusalKeep int64
	maxRefusals               int
}

func (m *model) apply(p modelParams, c *fsmpb.Command) Result {
	margin, keep := p.margin, p.keep
	switch op := c.Op.(type) {
	case *fsmpb.Command_Acquire:
		a := op.Acquire
		if a.TtlNs <= 2*margin {
			return Result{Err: ErrInvalidArgument}
		}
		scope := a.Scope
		if scope == "" {
			scope = a.Resource
		}
		req := reqModel{a.Resource, scope, a.Holder, a.TtlNs, a.Wait}
		if d, ok := m.dedup[a.RequestId]; ok && a.RequestId != "" {
			if d.req != req {
				return Result{Err: ErrRequestIDReused}
			}
			if d.refused {
				return Result{Err: ErrHeld, Replayed: true}
			}
			if i := m.find(func(l Lease) bool { return l.ID == d.lease.ID }); i >= 0 && m.now < m.leases[i].ExpiresAt {
				return Result{Lease: m.leases[i], Remaining: m.rem(m.leases[i]), Replayed: true}
			}
			return Result{Err: ErrLeaseEnded, Replayed: true}
		}
		if i := m.find(func(l Lease) bool { return l.Resource == a.Resource }); i >= 0 {
			if m.now <= m.leases[i].ExpiresAt+margin {
				if a.RequestId != "" && !a.Wait {
					m.addRefusal(a.RequestId, dedupModel{at: m.now, lease: m.leases[i], refused: true, req: req}, p.maxRefusals)
				}
				return Result{Err: ErrHeld}
			}
			m.leases = append(m.leases[:i], m.leases[i+1:]...)
		}
		m.counters[scope]++
		l := Lease{Resource: a.Resource, Scope: scope, Token: m.counters[scope], Holder: a.Holder, TTL: a.TtlNs, GrantedAt: m.now, ExpiresAt: m.now + a.TtlNs}
		copy(l.ID[:], a.LeaseId)
		m.leases = append(m.leases, l)
		if a.RequestId != "" {
			m.seq++
			m.dedup[a.RequestId] = dedupModel{at: m.now, seq: m.seq, lease: l, req: req}
		}
		return Result{Lease: l, Remaining: m.rem(l)}
	case *fsmpb.Command_Renew:
		i := m.find(func(l Lease) bool { return bytes.Equal(l.ID[:], op.Renew.LeaseId) })
		if i < 0 || m.now > m.leases[i].ExpiresAt {
			return Result{Err: ErrNotFound}
		}
		m.leases[i].ExpiresAt = m.now + m.leases[i].TTL
		return Result{Lease: m.leases[i], Remaining: m.rem(m.leases[i])}
	case *fsmpb.Command_Release:
		i := m.find(func(l Lease) bool { return bytes.Equal(l.ID[:], op.Release.LeaseId) })
		if i < 0 || m.now > m.leases[i].ExpiresAt {
			return Result{}
		}
		l := m.leases[i]
		m.leases = append(m.leases[:i], m.leases[i+1:]...)
		return Result{Released: true, Lease: l}
	case *fsmpb.Command_Tick:
		// Expire the earliest (by expires_at, then resource) up to the limit.
		n := 0
		for op.Tick.MaxExpire == 0 || n < int(op.Tick.MaxExpire) {
			best := -1
			for i, l := range m.leases {
				if m.now <= l.ExpiresAt+margin {
					continue
				}
				if best < 0 || l.ExpiresAt < m.leases[best].ExpiresAt ||
					(l.ExpiresAt == m.leases[best].ExpiresAt && l.Resource < m.leases[best].Resource) {
					best = i
				}
			}
			if best < 0 {
				break
			}
			m.leases = append(m.leases[:best], m.leases[best+1:]...)
			n++
		}
		rkeep := p.refusalKeep
		if rkeep == 0 {
			rkeep = keep
		}
		for id, d := range m.dedup {
			if (!d.refused && m.now-d.at > keep) || (d.refused && m.now-d.at > rkeep) {
				delete(m.dedup, id)
			}
		}
		return Result{Expired: n}
	}
	panic("unknown op")
}

// addRefusal remembers a refusal, first forgetting the oldest refusals
// while max (0: no cap) are remembered.
func (m *model) addRefusal(id string, d dedupModel, max int) {
	for max > 0 {
		n, oldest := 0, ""
		for k, e := range m.dedup {
			if e.refused {
				n++
				if oldest == "" || e.seq < m.dedup[oldest].seq {
					oldest = k
				}
			}
		}
		if n < max {
			break
		}
		delete(m.dedup, oldest)
	}
	m.seq++
	d.seq = m.seq
	m.dedup[id] = d
}

func sameResult(got, want Result) error {
	switch {
	case want.Err != nil:
		if !errors.Is(got.Err, want.Err) {
			return fmt.Errorf("err = %v, want %v", got.Err, want.Err)
		}
		return nil
	case got.Err != nil:
		return fmt.Errorf("unexpected err %v", got.Err)
	case got.Lease != want.Lease:
		return fmt.Errorf("lease = %+v, want %+v", got.Lease, want.Lease)
	case got.Remaining != want.Remaining, got.Replayed != want.Replayed, got.Released != want.Released, got.Expired != want.Expired:
		return fmt.Errorf("result = %+v, want %+v", got, want)
	}
	return nil
}

// TestStateMatchesReferenceModel drives the FSM and the model with random
// command sequences and checks, after every entry: the same outcome, tokens
// strictly increasing per scope over all grants, at most one lease per
// resource, and that a snapshot restores to byte-identical state which then
// evolves identically (the restored replica applies every later entry too).
func TestStateMatchesReferenceModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s, m := New(), newModel()
		var replica *State // restored from a snapshot mid-run
		twin := New()      // fed the same log from the start
		now := int64(0)
		lastToken := map[string]uint64{}
		var ids [][]byte
		nextID := 0
		resources := []string{"a", "b", "c", "d"}
		steps := rapid.IntRange(1, 120).Draw(rt, "steps")
		for step := 0; step < steps; step++ {
			// Whole seconds make equal expiry times (heap ties) common.
			now += sec * rapid.Int64Range(0, 4).Draw(rt, "advance")
			stamp := now - sec*rapid.Int64Range(0, 1).Draw(rt, "lag") // stamps may lag behind
			margin := testMargin
			keep := rapid.SampledFrom([]int64{5 * sec, testKeep}).Draw(rt, "keep")
			refusalKeep := rapid.SampledFrom([]int64{0, 2 * sec}).Draw(rt, "refusal keep")
			maxRefusals := rapid.SampledFrom([]int{0, 1, 2}).Draw(rt, "max refusals")
			n := rapid.IntRange(1, 4).Draw(rt, "batch")
			cmds := make([]*fsmpb.Command, 0, n)
			for i := 0; i < n; i++ {
				switch rapid.IntRange(0, 9).Draw(rt, "op") {
				case 0, 1, 2, 3:
					nextID++
					id := make([]byte, LeaseIDLen)
					id[0], id[1] = byte(nextID), byte(nextID>>8)
					ids = append(ids, id)
					a := &fsmpb.Acquire{
						Resource: rapid.SampledFrom(resources).Draw(rt, "resource"),
						Holder:   "w",
						TtlNs:    rapid.SampledFrom([]int64{sec / 2, 2 * sec, 5 * sec, 10 * sec}).Draw(rt, "ttl"),
						LeaseId:  id,
					}
					if rapid.Bool().Draw(rt, "shared scope") {
						a.Scope = "shard"
					}
					if rapid.Bool().Draw(rt, "with request id") {
						a.RequestId = fmt.Sprintf("req-%d", rapid.IntRange(0, 6).Draw(rt, "req"))
					}
					a.Wait = rapid.IntRange(0, 4).Draw(rt, "wait") == 0
					a.Holder = rapid.SampledFrom([]string{"w", "w", "v"}).Draw(rt, "holder")
					cmds = append(cmds, &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: a}})
				case 4, 5:
					if len(ids) > 0 {
						cmds = append(cmds, &fsmpb.Command{Op: &fsmpb.Command_Renew{Renew: &fsmpb.Renew{LeaseId: rapid.SampledFrom(ids).Draw(rt, "id")}}})
					}
				case 6, 7:
					if len(ids) > 0 {
						cmds = append(cmds, &fsmpb.Command{Op: &fsmpb.Command_Release{Release: &fsmpb.Release{LeaseId: rapid.SampledFrom(ids).Draw(rt, "id")}}})
					}
				default:
					limit := rapid.SampledFrom([]uint32{0, 1, 2}).Draw(rt, "expire limit")
					cmds = append(cmds, &fsmpb.Command{Op: &fsmpb.Command_Tick{Tick: &fsmpb.Tick{MaxExpire: limit}}})
				}
			}
			raw, err := EncodeBatch(&fsmpb.Batch{NowNs: stamp, SkewMarginNs: margin, DedupKeepNs: keep,
				RefusalKeepNs: refusalKeep, MaxRefusals: uint64(maxRefusals), Commands: cmds})
			if err != nil {
				rt.Fatal(err)
			}
			a, err := s.Apply(raw)
			if err != nil {
				rt.Fatal(err)
			}
			if _, err := twin.Apply(raw); err != nil {
				rt.Fatal(err)
			}
			if replica != nil {
				if _, err := replica.Apply(raw); err != nil {
					rt.Fatal(err)
				}
			}
			m.stamp(stamp)
			for i, c := range cmds {
				want := m.apply(modelParams{margin, keep, refusalKeep, maxRefusals}, c)
				if err := sameResult(a.Results[i], want); err != nil {
					rt.Fatalf("step %d cmd %d (%T): %v", step, i, c.Op, err)
				}
			}
			for _, ev := range a.Events {
				if ev.Type != EventGranted {
					continue
				}
				if ev.Lease.Token <= lastToken[ev.Lease.Scope] {
					rt.Fatalf("token %d in scope %q not above %d", ev.Lease.Token, ev.Lease.Scope, lastToken[ev.Lease.Scope])
				}
				lastToken[ev.Lease.Scope] = ev.Lease.Token
			}
			if s.Len() != len(m.leases) {
				rt.Fatalf("lease count %d, model %d", s.Len(), len(m.leases))
			}
			for _, ml := range m.leases {
				if got, ok := s.Lease(ml.Resource); !ok || got != ml {
					rt.Fatalf("lease on %q: %+v, model %+v", ml.Resource, got, ml)
				}
			}
			raw1 := snapshotBytes(rt, s)
			if !bytes.Equal(raw1, snapshotBytes(rt, twin)) {
				rt.Fatalf("step %d: two states fed the same log differ", step)
			}
			if replica == nil && rapid.Bool().Draw(rt, "restore here") {
				if replica, err = Restore(bytes.NewReader(raw1)); err != nil {
					rt.Fatal(err)
				}
			}
			if replica != nil && !bytes.Equal(raw1, snapshotBytes(rt, replica)) {
				rt.Fatalf("step %d: replica restored from snapshot diverged", step)
			}
		}
	})
}
