package jepsen

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasefence/leasefence/fence/fencekv"
	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/checker/checkertest"
	"github.com/leasefence/leasefence/jepsen/history"
	nm "github.com/leasefence/leasefence/jepsen/nemesis"
	"github.com/leasefence/leasefence/jepsen/report"
)

// In a run with clock-rate faults the exclusion checkers are reported but
// do not decide the run; the fencing checkers and linearizability still do.
func TestOutOfSpecClockRateMakesOnlyExclusionCheckersNotRequired(t *testing.T) {
	b := checkertest.Valid()
	// Overlapping safe windows on q, and grants the watcher never saw: the
	// two exclusion checkers fail.
	b.Acquire("w3", "a3", "q", 1, "Q1", 0, 10*ms, 2000*ms).
		Acquire("w4", "a4", "q", 2, "Q2", 1400*ms, 1500*ms, 3500*ms).
		Release("w4", "r4", "q", 2, "Q2", 1600*ms, 3500*ms)
	check := func(nemeses []string, audit []fencekv.AuditRecord) []checker.Result {
		rs := checker.CheckAll(b.Recs, audit, 300*time.Millisecond)
		checker.MarkRequired(nemeses, rs)
		return rs
	}
	byName := func(rs []checker.Result, name string) checker.Result {
		for _, r := range rs {
			if r.Checker == name {
				return r
			}
		}
		t.Fatalf("no %s result", name)
		return checker.Result{}
	}

	// In spec (clock-bump, clock-strobe): every checker is required.
	rs := check([]string{history.NemClockBump, history.NemClockStrobe}, checkertest.ValidAudit())
	expect(t, byName(rs, checker.NameSafeWindows), checker.Invalid, checker.AnomalyOverlappingSafeWindow)
	expect(t, byName(rs, checker.NameGrantIntervals), checker.Invalid, checker.AnomalyAckedGrantMissing)
	if p, f := checker.Tally(rs); p != 7 || f != 2 || checker.NotCounted(rs) != 0 {
		t.Fatalf("in spec: %d passed, %d failed, %d not counted", p, f, checker.NotCounted(rs))
	}
	sum := &Summary{Results: rs}
	if !sum.Anomalous() {
		t.Fatal("in spec: the exclusion anomalies do not make the run anomalous")
	}

	// Out of spec: the same verdicts, printed and recorded, not counted.
	rs = check([]string{history.NemKill, history.NemClockRate}, checkertest.ValidAudit())
	if p, f := checker.Tally(rs); p != 7 || f != 0 || checker.NotCounted(rs) != 2 {
		t.Fatalf("out of spec: %d passed, %d failed, %d not counted", p, f, checker.NotCounted(rs))
	}
	for _, name := range []string{checker.NameSafeWindows, checker.NameGrantIntervals} {
		r := byName(rs, name)
		if r.Verdict != checker.Invalid || r.Required() || !strings.Contains(r.String(), "invalid (not required: out-of-spec clock rate)") {
			t.Fatalf("out of spec %s: %s", name, r)
		}
		j, _ := json.Marshal(r)
		if !strings.Contains(string(j), `"not_required":"out-of-spec clock rate"`) {
			t.Fatalf("summary.json loses the reason: %s", j)
		}
	}
	sum = &Summary{Results: rs}
	sum.Passed, sum.Failed = checker.Tally(rs)
	if sum.Anomalous() || !sum.AllValid() {
		t.Fatal("out of spec: a not-required anomaly decided the run")
	}
	var page bytes.Buffer
	report.Render(&page, sum.reportRun(), b.Recs, nil)
	if !strings.Contains(page.String(), "invalid (not required: out-of-spec clock rate)") {
		t.Fatal("report.html does not say the verdict is not required")
	}

	// Out of spec, but a fencing checker fails: that still decides the run.
	audit := append(checkertest.ValidAudit(), fencekv.AuditRecord{Seq: 7, Op: "put", Key: "r", Scope: "r", Token: 1, Outcome: fencekv.OutcomeAccepted})
	rs = check([]string{history.NemClockRate}, audit)
	expect(t, byName(rs, checker.NameFencedTokens), checker.Invalid, checker.AnomalyStaleWriteAccepted)
	if p, f := checker.Tally(rs); p != 6 || f != 1 || !byName(rs, checker.NameFencedTokens).Required() {
		t.Fatalf("out of spec with a stale write: %d passed, %d failed", p, f)
	}
	if sum := (&Summary{Results: rs}); !sum.Anomalous() {
		t.Fatal("a stale write accepted in an out-of-spec run is not an anomaly")
	}
	for _, name := range []string{checker.NameTokens, checker.NameFinalRead, checker.NameLinearizable} {
		if !byName(rs, name).Required() {
			t.Fatalf("%s is not required in an out-of-spec run", name)
		}
	}
}

func TestClockNemesesParseAndTurnOnTheFaultClock(t *testing.T) {
	ks, err := nm.ParseNemeses("clock-bump,clock-strobe,clock-rate")
	if err != nil || len(ks) != 3 || !UsesClock(ks) {
		t.Fatal(ks, err)
	}
	if UsesClock([]string{history.NemKill, history.NemClientPause}) {
		t.Fatal("process nemeses need no fault clock")
	}
	args := expandID(ClockArgs("res/logs"), "n2")
	if strings.Join(args, " ") != "--unsafe-fault-clock "+filepath.Join("res/logs", "n2", ClockFile) {
		t.Fatalf("args %v", args)
	}
}

func TestClockControlFileIsWrittenWhole(t *testing.T) {
	dir := t.TempDir()
	fc := fileClocks{dir: dir}
	for _, off := range []time.Duration{time.Hour, -3 * time.Second, 0} {
		if err := fc.SetClock("n1", 2, off); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "n1", ClockFile))
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil || got["rate"] != 2.0 || got["wall_offset_ns"] != float64(off) || len(got) != 2 {
			t.Fatalf("control file %s (%v)", b, err)
		}
	}
	if es, _ := os.ReadDir(filepath.Join(dir, "n1")); len(es) != 1 {
		t.Fatalf("temporary files left: %v", es)
	}
}
