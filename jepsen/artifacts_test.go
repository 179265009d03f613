package jepsen

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/checker/checkertest"
	"github.com/leasefence/leasefence/jepsen/history"
	"github.com/leasefence/leasefence/jepsen/report"
)

func TestRegenerateArtifactsFromAStoredRun(t *testing.T) {
	dir := t.TempDir()
	h, faults := checkertest.ReportHistory()
	sum := &Summary{Dir: dir, Results: checker.CheckAll(h, checkertest.ValidAudit(), 300*time.Millisecond)}
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
	for _, name := range append([]string{"report.html", report.LinearizabilityFile}, report.PlotFiles...) {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	page, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	if !strings.Contains(string(page), "kill-leader n1") || !strings.Contains(string(page), checker.NameLinearizable) {
		t.Fatal("report.html lacks the faults or the checker table")
	}
}
