package fsm

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// heldByScan is HeldBy the slow way: every lease, by its holder label.
func heldByScan(s *State, owner string) int {
	n := 0
	for _, sl := range s.byID {
		if l := sl.l; l.Holder == owner || (len(l.Holder) > len(owner) && l.Holder[:len(owner)+1] == owner+OwnerSep) {
			n++
		}
	}
	return n
}

// HeldBy's per-owner counts match a scan of every lease after each entry of
// random histories of grants (fresh and over an expired lease), renewals,
// releases, ticks and replays, and after a snapshot restore replaces the
// state; the counts never keep an owner with no lease.
func TestHeldByCountsStayRightAcrossGrantRenewReleaseExpireRestore(t *testing.T) {
	owners := []string{"a", "b", "ab"}
	holders := []string{"a", "a|x", "a|y", "b", "b|x", "ab", "ab|a"}
	resources := []string{"r1", "r2", "r3", "r4", "r5"}
	rapid.Check(t, func(rt *rapid.T) {
		s := New()
		now := int64(0)
		next := 0
		var ids [][]byte
		steps := rapid.IntRange(1, 100).Draw(rt, "steps")
		for step := 0; step < steps; step++ {
			now += sec * rapid.Int64Range(0, 3).Draw(rt, "advance")
			var c *fsmpb.Command
			switch op := rapid.IntRange(0, 5).Draw(rt, "op"); {
			case op <= 1 || len(ids) == 0:
				next++
				id := make([]byte, LeaseIDLen)
				id[0], id[1] = byte(next), byte(next>>8)
				ids = append(ids, id)
				a := &fsmpb.Acquire{
					Resource: rapid.SampledFrom(resources).Draw(rt, "resource"),
					Holder:   rapid.SampledFrom(holders).Draw(rt, "holder"),
					TtlNs:    rapid.SampledFrom([]int64{2 * sec, 5 * sec}).Draw(rt, "ttl"),
					LeaseId:  id,
				}
				if rapid.Bool().Draw(rt, "with request id") {
					a.RequestId = fmt.Sprintf("req-%d", rapid.IntRange(0, 4).Draw(rt, "req"))
				}
				c = &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: a}}
			case op == 2:
				c = &fsmpb.Command{Op: &fsmpb.Command_Renew{Renew: &fsmpb.Renew{LeaseId: rapid.SampledFrom(ids).Draw(rt, "id")}}}
			case op == 3:
				c = &fsmpb.Command{Op: &fsmpb.Command_Release{Release: &fsmpb.Release{LeaseId: rapid.SampledFrom(ids).Draw(rt, "id")}}}
			case op == 4:
				c = &fsmpb.Command{Op: &fsmpb.Command_Tick{Tick: &fsmpb.Tick{MaxExpire: rapid.Uint32Range(0, 2).Draw(rt, "limit")}}}
			default:
				restored, err := Restore(bytes.NewReader(snapshotBytes(rt, s)))
				if err != nil {
					rt.Fatal(err)
				}
				s = restored
			}
			if c != nil {
				raw, err := EncodeBatch(&fsmpb.Batch{NowNs: now, SkewMarginNs: testMargin, DedupKeepNs: testKeep, Commands: []*fsmpb.Command{c}})
				if err != nil {
					rt.Fatal(err)
				}
				if _, err := s.Apply(raw); err != nil {
					rt.Fatal(err)
				}
			}
			total := 0
			for _, o := range owners {
				if got, want := s.HeldBy(o), heldByScan(s, o); got != want {
					rt.Fatalf("step %d: HeldBy(%q) = %d, leases held = %d", step, o, got, want)
				}
			}
			for o, n := range s.owners {
				if n <= 0 {
					rt.Fatalf("step %d: owner %q kept with count %d", step, o, n)
				}
				total += n
			}
			if total != s.Len() {
				rt.Fatalf("step %d: owner counts sum to %d, %d leases held", step, total, s.Len())
			}
		}
	})
}

// BenchmarkLeaseLimitCount compares the per-identity count a policy's lease
// limit needs, at many leases: the scan (CountHeld) against the kept count
// (HeldBy).
func BenchmarkLeaseLimitCount(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		s := New()
		now := sec
		const chunk = 1000
		for i := 0; i < n; i += chunk {
			cmds := make([]*fsmpb.Command, 0, chunk)
			for j := i; j < i+chunk && j < n; j++ {
				id := make([]byte, LeaseIDLen)
				id[0], id[1], id[2], id[3] = byte(j), byte(j>>8), byte(j>>16), 1
				cmds = append(cmds, &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{
					Resource: fmt.Sprintf("r/%d", j), Holder: fmt.Sprintf("id%d|w", j%10), TtlNs: 600 * sec, LeaseId: id,
				}}})
			}
			raw, err := EncodeBatch(&fsmpb.Batch{NowNs: now, SkewMarginNs: testMargin, DedupKeepNs: testKeep, Commands: cmds})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Apply(raw); err != nil {
				b.Fatal(err)
			}
		}
		const owner = "id3"
		want := n / 10
		b.Run(fmt.Sprintf("scan/leases=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if got := s.CountHeld(func(h string) bool { return h == owner || (len(h) > 4 && h[:4] == owner+OwnerSep) }); got != want {
					b.Fatalf("count %d, want %d", got, want)
				}
			}
		})
		b.Run(fmt.Sprintf("kept/leases=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if got := s.HeldBy(owner); got != want {
					b.Fatalf("count %d, want %d", got, want)
				}
			}
		})
	}
}

// HeldError's message is built by hand (no fmt); it must read as the
// format it replaced, for any resource, holder, token and time left.
func TestHeldErrorMessage(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := &HeldError{
			// Any bytes, valid UTF-8 or not.
			Resource: string(rapid.SliceOf(rapid.Byte()).Draw(t, "resource")),
			Holder:   rapid.OneOf(rapid.String(), rapid.Map(rapid.SliceOf(rapid.Byte()), func(b []byte) string { return string(b) })).Draw(t, "holder"),
			Token:    rapid.Uint64().Draw(t, "token"),
			TimeLeft: time.Duration(rapid.Int64().Draw(t, "left")),
		}
		want := fmt.Sprintf("fsm: resource %q held by %q (token %d), free in %v", e.Resource, e.Holder, e.Token, e.TimeLeft)
		if got := e.Error(); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	})
}
