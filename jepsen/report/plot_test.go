package report

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/checker/checkertest"
	"github.com/leasefence/leasefence/jepsen/history"
)

func TestReportWritesPlotsAndLinearizabilityVisualization(t *testing.T) {
	dir := t.TempDir()
	h, faults := checkertest.ReportHistory()
	sum := Run{Dir: dir, Results: checker.CheckAll(h, checkertest.ValidAudit(), 300*time.Millisecond)}
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
	h, _ := checkertest.ReportHistory()
	_, result, info := checker.LinearizabilityInfo(h, 10*time.Second)
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

func TestReportRenders(t *testing.T) {
	var buf bytes.Buffer
	sum := Run{Dir: "x", Results: checker.CheckAll(checkertest.Valid().Recs, checkertest.ValidAudit(), 300*time.Millisecond)}
	Render(&buf, sum, checkertest.Valid().Recs, []history.Fault{{Phase: "start", Kind: history.NemKill, Target: "n1", TimeNs: 20 * ms}, {Phase: "heal", Kind: history.NemKill, Target: "n1", TimeNs: 90 * ms}})
	for _, want := range []string{"<svg", "fenced-tokens-monotonic", "kill n1", "token 2"} {
		if !strings.Contains(buf.String(), want) {
			t.Fatalf("report lacks %q", want)
		}
	}
}

const ms = int64(time.Millisecond)
