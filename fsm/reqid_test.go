package fsm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// reqAcquire is the request every test below first sends under request id
// "R": resource r, default scope, holder h, ttl 10 s, no wait.
func reqAcquire(id byte) *fsmpb.Acquire {
	return &fsmpb.Acquire{Resource: "r", Holder: "h", TtlNs: 10 * sec, RequestId: "R", LeaseId: leaseID(id)}
}

func acquireOf(a *fsmpb.Acquire) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: a}}
}

// changedParameters are retries of reqAcquire's request id with one
// parameter changed: each is another request.
var changedParameters = []struct {
	name   string
	change func(a *fsmpb.Acquire)
}{
	{"resource", func(a *fsmpb.Acquire) { a.Resource = "other" }},
	{"scope", func(a *fsmpb.Acquire) { a.Scope = "dk" }},
	{"holder", func(a *fsmpb.Acquire) { a.Holder = "h2" }},
	{"ttl", func(a *fsmpb.Acquire) { a.TtlNs = 20 * sec }},
	{"wait", func(a *fsmpb.Acquire) { a.Wait = true }},
}

// changedParameterViolations applies every changed retry to s at now (the
// stamp of s's last entry, so time does not move) and returns, per changed
// parameter, how it broke the rule: each must be refused as
// ErrRequestIDReused (an InvalidArgument), carry no lease and change
// nothing.
func changedParameterViolations(t testing.TB, s *State, now int64) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i, tc := range changedParameters {
		before := snapshotBytes(t, s)
		a := reqAcquire(byte(100 + i))
		tc.change(a)
		r := apply(t, s, now, acquireOf(a))
		switch {
		case !errors.Is(r.Err, ErrRequestIDReused) || !errors.Is(r.Err, ErrInvalidArgument):
			out[tc.name] = fmt.Sprintf("want ErrRequestIDReused (invalid argument), got %+v", r)
		case r.Lease != (Lease{}) || r.Remaining != 0:
			out[tc.name] = fmt.Sprintf("a refused reuse carries a lease: %+v", r)
		case !bytes.Equal(before, snapshotBytes(t, s)):
			out[tc.name] = "a refused reuse changed the state"
		}
	}
	return out
}

func checkChangedParametersRefused(t *testing.T, s *State, now int64) {
	t.Helper()
	for name, v := range changedParameterViolations(t, s, now) {
		t.Errorf("request id reused with another %s: %s", name, v)
	}
}

// A request id names one request: a retry carries the same resource,
// scope (the effective one), holder, ttl and wait flag. A grant's request
// id with any parameter changed is refused, before and after a snapshot
// round trip; the same request is replayed.
func TestRequestIDOfAGrantWithAnyParameterChangedIsRefused(t *testing.T) {
	s := New()
	first := apply(t, s, 1*sec, acquireOf(reqAcquire(1)))
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	checkChangedParametersRefused(t, s, 1*sec)
	// The same request again, the default scope named explicitly included:
	// the effective scope is what counts.
	same := reqAcquire(2)
	same.Scope = "r"
	if r := apply(t, s, 2*sec, acquireOf(same)); r.Err != nil || !r.Replayed || r.Lease != first.Lease {
		t.Fatalf("the same request: %+v", r)
	}
	restored, err := Restore(bytes.NewReader(snapshotBytes(t, s)))
	if err != nil {
		t.Fatal(err)
	}
	checkChangedParametersRefused(t, restored, 2*sec)
	if r := apply(t, restored, 3*sec, acquireOf(reqAcquire(3))); r.Err != nil || !r.Replayed || r.Lease != first.Lease {
		t.Fatalf("the same request after restore: %+v", r)
	}
}

// The same for a request id whose first outcome was a refusal: a changed
// retry is refused as invalid, not answered as held, before and after a
// snapshot round trip.
func TestRequestIDOfARefusalWithAnyParameterChangedIsRefused(t *testing.T) {
	s := New()
	apply(t, s, 1*sec, acquireCmd("r", 10*sec, 1, "holder"))
	var held *HeldError
	if r := apply(t, s, 1*sec, acquireOf(reqAcquire(2))); !errors.As(r.Err, &held) || r.Replayed {
		t.Fatalf("first attempt: %+v", r)
	}
	checkChangedParametersRefused(t, s, 1*sec)
	if r := apply(t, s, 2*sec, acquireOf(reqAcquire(3))); !errors.As(r.Err, &held) || !r.Replayed {
		t.Fatalf("the same request: %+v", r)
	}
	restored, err := Restore(bytes.NewReader(snapshotBytes(t, s)))
	if err != nil {
		t.Fatal(err)
	}
	checkChangedParametersRefused(t, restored, 2*sec)
	if r := apply(t, restored, 3*sec, acquireOf(reqAcquire(4))); !errors.As(r.Err, &held) || !r.Replayed {
		t.Fatalf("the same request after restore: %+v", r)
	}
}

// A replay of a grant whose lease has ended (released, expired, removed)
// is answered as ended, never as a live grant with no time left; before
// and after a snapshot round trip, and it changes nothing.
func TestReplayOfAnEndedGrantSaysEnded(t *testing.T) {
	ended := func(t *testing.T, s *State, now int64, first Lease) {
		t.Helper()
		if _, err := s.Apply(entry(t, now)); err != nil { // time moves on
			t.Fatal(err)
		}
		before := snapshotBytes(t, s)
		r := apply(t, s, now, acquireOf(reqAcquire(9)))
		var e *EndedError
		if !errors.As(r.Err, &e) || !errors.Is(r.Err, ErrLeaseEnded) {
			t.Fatalf("replay of an ended grant: want ErrLeaseEnded, got %+v", r)
		}
		if !r.Replayed || e.Lease.ID != first.ID || e.Lease.Token != first.Token || e.RequestID != "R" {
			t.Fatalf("ended replay: %+v (%+v), granted %+v", r, e, first)
		}
		if !bytes.Equal(before, snapshotBytes(t, s)) {
			t.Fatal("an ended replay changed the state")
		}
		rs, err := Restore(bytes.NewReader(snapshotBytes(t, s)))
		if err != nil {
			t.Fatal(err)
		}
		if r := apply(t, rs, now, acquireOf(reqAcquire(9))); !errors.Is(r.Err, ErrLeaseEnded) || !r.Replayed {
			t.Fatalf("after restore: %+v", r)
		}
	}
	t.Run("released", func(t *testing.T) {
		s := New()
		first := apply(t, s, 1*sec, acquireOf(reqAcquire(1))).Lease
		apply(t, s, 2*sec, releaseCmd(1))
		ended(t, s, 3*sec, first)
	})
	t.Run("past expiry, not yet removed", func(t *testing.T) {
		s := New()
		first := apply(t, s, 1*sec, acquireOf(reqAcquire(1))).Lease
		ended(t, s, 11*sec, first) // exactly expires_at: no time left
		ended(t, s, 11*sec+1, first)
	})
	t.Run("expired and removed", func(t *testing.T) {
		s := New()
		first := apply(t, s, 1*sec, acquireOf(reqAcquire(1))).Lease
		apply(t, s, 12*sec, tickCmd())
		if s.Len() != 0 {
			t.Fatal("not expired")
		}
		ended(t, s, 12*sec, first)
	})
	t.Run("live", func(t *testing.T) {
		s := New()
		first := apply(t, s, 1*sec, acquireOf(reqAcquire(1))).Lease
		if r := apply(t, s, 11*sec-1, acquireOf(reqAcquire(2))); r.Err != nil || !r.Replayed || r.Lease != first || r.Remaining != 1 {
			t.Fatalf("replay of a live grant: %+v", r)
		}
	})
}

// Refused request ids are kept refusal_keep (not dedup_keep) and at most
// max_refusals of them, the oldest forgotten first and counted, as the
// entry's parameters say: every replica, a restored one too, forgets the
// same ones. Grants are untouched by either.
func TestRefusalsAreKeptTheirWindowAndCappedOldestFirst(t *testing.T) {
	const refusalKeep, maxRefusals = 5 * sec, 3
	at := func(now int64, cmds ...*fsmpb.Command) []byte {
		b, err := EncodeBatch(&fsmpb.Batch{NowNs: now, SkewMarginNs: testMargin, DedupKeepNs: testKeep,
			RefusalKeepNs: refusalKeep, MaxRefusals: maxRefusals, Commands: cmds})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	s := New()
	var replica *State
	step := func(raw []byte) *Applied {
		t.Helper()
		a, err := s.Apply(raw)
		if err != nil {
			t.Fatal(err)
		}
		if replica != nil {
			if _, err := replica.Apply(raw); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(snapshotBytes(t, s), snapshotBytes(t, replica)) {
				t.Fatal("a restored replica forgot other refusals")
			}
		}
		return a
	}
	step(at(0, acquireCmd("r", 60*sec, 1, "grant")))
	for i, id := range []string{"a", "b", "c"} {
		if a := step(at(int64(i+1)*sec, acquireCmd("r", 10*sec, byte(2+i), id))); !errors.Is(a.Results[0].Err, ErrHeld) || a.RefusalsEvicted != 0 {
			t.Fatalf("refusal %s: %+v", id, a)
		}
	}
	var err error
	if replica, err = Restore(bytes.NewReader(snapshotBytes(t, s))); err != nil {
		t.Fatal(err)
	}
	// A fourth refusal forgets the oldest, a.
	if a := step(at(4*sec, acquireCmd("r", 10*sec, 5, "d"))); a.RefusalsEvicted != 1 {
		t.Fatalf("fourth refusal evicted %d", a.RefusalsEvicted)
	}
	if g, r := s.DedupLen(); g != 1 || r != maxRefusals {
		t.Fatalf("dedup holds %d grants, %d refusals", g, r)
	}
	if r := step(at(4*sec, acquireCmd("r", 10*sec, 6, "b"))).Results[0]; !r.Replayed || !errors.Is(r.Err, ErrHeld) {
		t.Fatalf("b is still remembered: %+v", r)
	}
	// Past refusal_keep of b and c (at 2 s and 3 s), not of d (4 s).
	step(at(8*sec+1, tickCmd()))
	if g, r := s.DedupLen(); g != 1 || r != 1 {
		t.Fatalf("after refusal_keep: %d grants, %d refusals", g, r)
	}
	// The grant is kept dedup_keep, whatever refusals do.
	if r := step(at(9*sec, acquireCmd("r", 60*sec, 7, "grant"))).Results[0]; !r.Replayed || r.Err != nil {
		t.Fatalf("the grant was forgotten: %+v", r)
	}
	step(at(10*sec, tickCmd()))
	if g, r := s.DedupLen(); g != 1 || r != 0 {
		t.Fatalf("after d's refusal_keep: %d grants, %d refusals", g, r)
	}
}

// An entry of a snapshot written before parameters were recorded
// (params_known unset) restores, and compares what its record holds: a
// refusal its resource only, a grant its resource, scope, holder and ttl
// but not its wait flag.
func TestOldSnapshotDedupEntriesCompareWhatTheyHold(t *testing.T) {
	s := New()
	apply(t, s, 1*sec, acquireCmd("held", 10*sec, 1, ""))
	apply(t, s, 1*sec, acquireOf(reqAcquire(2)))                    // grant R on r
	apply(t, s, 1*sec, acquireCmd("held", 10*sec, 3, "refused-id")) // a refusal
	// Rewrite the snapshot's request-id records as an older version wrote
	// them: no wait, no params, no params_known.
	raw := rewriteDedup(t, snapshotBytes(t, s), func(rec *fsmpb.DedupRecord) {
		rec.Wait, rec.Params, rec.ParamsKnown = false, 0, false
	})
	old, err := Restore(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("an older snapshot does not restore: %v", err)
	}
	// The refusal: another holder is not told apart, still a refusal.
	other := acquireCmd("held", 10*sec, 4, "refused-id")
	other.GetAcquire().Holder = "someone else"
	if r := apply(t, old, 1*sec, other); !r.Replayed || !errors.Is(r.Err, ErrHeld) {
		t.Fatalf("old refusal entry: %+v", r)
	}
	if r := apply(t, old, 1*sec, acquireCmd("r", 10*sec, 5, "refused-id")); !errors.Is(r.Err, ErrRequestIDReused) {
		t.Fatalf("old refusal entry, another resource: %+v", r)
	}
	// The grant: wait is not compared, everything its record holds is.
	w := reqAcquire(6)
	w.Wait = true
	if r := apply(t, old, 1*sec, acquireOf(w)); !r.Replayed || r.Err != nil {
		t.Fatalf("old grant entry, wait: %+v", r)
	}
	checkChangedParametersRefusedExcept(t, old, 1*sec, "wait")

	// Such entries encode unlike the same entries applied by this
	// version (params_known), so a snapshot holding them says so and no
	// state check compares its hash, until they are pruned.
	if !old.Snapshot().Legacy() {
		t.Fatal("a snapshot holding entries of an older snapshot is not Legacy")
	}
	if s.Snapshot().Legacy() {
		t.Fatal("a snapshot of entries this version applied is Legacy")
	}
	apply(t, old, 3600*sec, tickCmd())
	if old.Snapshot().Legacy() {
		t.Fatal("Legacy after every old entry was pruned")
	}
}

// checkChangedParametersRefusedExcept is checkChangedParametersRefused
// without the named parameter.
func checkChangedParametersRefusedExcept(t *testing.T, s *State, now int64, except string) {
	t.Helper()
	for name, v := range changedParameterViolations(t, s, now) {
		if name != except {
			t.Errorf("request id reused with another %s: %s", name, v)
		}
	}
}

// rewriteDedup returns the snapshot raw with every request-id record
// passed through change.
func rewriteDedup(t *testing.T, raw []byte, change func(rec *fsmpb.DedupRecord)) []byte {
	t.Helper()
	var out bytes.Buffer
	dec := &recordReader{r: bufio.NewReader(bytes.NewReader(raw))}
	enc := &recordWriter{w: &out}
	for {
		typ, body, err := dec.next()
		if err != nil {
			t.Fatal(err)
		}
		if typ == recDedup {
			var rec fsmpb.DedupRecord
			if err := proto.Unmarshal(body, &rec); err != nil {
				t.Fatal(err)
			}
			change(&rec)
			enc.write(recDedup, &rec)
			continue
		}
		enc.writeRaw(typ, append([]byte(nil), body...))
		if typ == recEnd {
			return out.Bytes()
		}
	}
}

// Request-id records a State cannot hold are refused on restore.
func TestRestoreRejectsImpossibleRequestIDRecords(t *testing.T) {
	s := New()
	apply(t, s, 1*sec, acquireCmd("held", 10*sec, 1, ""))
	apply(t, s, 1*sec, acquireCmd("held", 10*sec, 2, "refused-id"))
	cases := map[string]func(rec *fsmpb.DedupRecord){
		"a waiting acquire's refusal":     func(rec *fsmpb.DedupRecord) { rec.Wait = true },
		"parameters without params_known": func(rec *fsmpb.DedupRecord) { rec.ParamsKnown = false },
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := Restore(bytes.NewReader(rewriteDedup(t, snapshotBytes(t, s), change)))
			if !errors.Is(err, ErrCorruptSnapshot) || r != nil {
				t.Fatalf("want ErrCorruptSnapshot, got %v", err)
			}
		})
	}
}
