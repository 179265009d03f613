package jepsen

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasefence/leasefence/jepsen/history"
)

// reportHistory is valid() with an unknown write, a refused write, a
// second linearizability resource and a fault that is never healed: every
// kind of mark the plots draw.
func reportHistory() ([]history.Record, []history.Fault) {
	b := valid()
	b.write("w1", "r", "e3", 1, history.Fail, 180*ms)
	b.recs = append(b.recs,
		history.Record{Kind: history.Invoke, Worker: "w3", Op: "e4-w", Type: history.OpWrite, Resource: "r2", Element: "e4", TimeNs: 200 * ms},
		history.Record{Kind: history.Complete, Worker: "w3", Op: "e4-w", Type: history.OpWrite, Resource: "r2", Element: "e4", TimeNs: 1500 * ms, Result: history.Unknown, Error: "timeout"})
	for _, r := range linValid() {
		r.Resource = "jl/1"
		r.TimeNs += 1200 * ms
		b.recs = append(b.recs, r)
	}
	faults := []history.Fault{
		{Phase: "start", Kind: NemKillLeader, Target: "n1", Leader: true, TimeNs: 20 * ms},
		{Phase: "heal", Kind: NemKillLeader, Target: "n1", TimeNs: 90 * ms, Effective: true, Detail: "restarted"},
		{Phase: "start", Kind: NemPartitionHalves, Target: "n2|n1,n3", TimeNs: 1100 * ms},
	}
	return b.recs, faults
}

func TestReportWritesPlotsAndLinearizabilityVisualization(t *testing.T) {
	dir := t.TempDir()
	h, faults := reportHistory()
	sum := &Summary{Dir: dir, Results: CheckAll(h, validAudit(), 300*time.Millisecond)}
	if err := WriteReport(filepath.Join(dir, "report.html"), sum, h, faults); err != nil {
		t.Fatal(err)
	}
	for _, name := range PlotFiles {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s is not a PNG: %v", name, err)
		}
		if r := img.Bounds(); r.Dx() < 500 || r.Dy() < 100 {
			t.Fatalf("%s is %v", name, r)
		}
	}
	lin, err := os.ReadFile(filepath.Join(dir, LinearizabilityFile))
	if err != nil {
		t.Fatal(err)
	}
	// porcupine's page embeds its data as JSON: both partitions, the
	// operations described by the model, the faults as annotations.
	for _, want := range []string{"<html", "</html>", "acquire → token 2 lease", "jl/1, worker l2", `"Tag":"nemesis kill-leader"`, `"Tag":"nemesis partition-halves"`, "restarted"} {
		if !bytes.Contains(lin, []byte(want)) {
			t.Fatalf("%s lacks %q", LinearizabilityFile, want)
		}
	}
	report, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range append([]string{"href='" + LinearizabilityFile + "'", "porcupine: Ok"}, PlotFiles...) {
		if !strings.Contains(string(report), want) {
			t.Fatalf("report.html lacks %q", want)
		}
	}
}

func TestLinearizabilityInfoKeepsOnePartitionPerResource(t *testing.T) {
	h, _ := reportHistory()
	_, result, info := LinearizabilityInfo(h, 10*time.Second)
	if result != porcupine.Ok {
		t.Fatalf("result %v", result)
	}
	parts := info.PartialLinearizations()
	if len(parts) != 2 {
		t.Fatalf("%d partitions, want 2 (jl/0, jl/1)", len(parts))
	}
	for i, p := range parts {
		if len(p) == 0 || len(p[0]) != 9 {
			t.Fatalf("partition %d: %v, want one full linearization of 9 operations", i, p)
		}
	}
	// A history without the workload writes no visualization.
	if r, err := WriteLinearizability(filepath.Join(t.TempDir(), "x.html"), nil, nil, time.Second); r != "" || err != nil {
		t.Fatal(r, err)
	}
}

func TestRegenerateArtifactsFromAStoredRun(t *testing.T) {
	dir := t.TempDir()
	h, faults := reportHistory()
	sum := &Summary{Dir: dir, Results: CheckAll(h, validAudit(), 300*time.Millisecond)}
	if err := writeJSON(filepath.Join(dir, "summary.json"), sum); err != nil {
		t.Fatal(err)
	}
	var nem bytes.Buffer
	w := history.NewWriter(&nem)
	for _, f := range faults {
		_ = w.Write(f)
	}
	_ = w.Flush()
	if err := os.WriteFile(filepath.Join(dir, "nemesis.jsonl"), nem.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RegenerateArtifacts(dir, h); err != nil {
		t.Fatal(err)
	}
	for _, name := range append([]string{"report.html", LinearizabilityFile}, PlotFiles...) {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	report, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	if !strings.Contains(string(report), "kill-leader n1") || !strings.Contains(string(report), NameLinearizable) {
		t.Fatal("report.html lacks the faults or the checker table")
	}
}

func TestPlotsOfAnEmptyHistoryAreStillWritten(t *testing.T) {
	dir := t.TempDir()
	if err := WritePlots(dir, nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range PlotFiles {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		_, err = png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
