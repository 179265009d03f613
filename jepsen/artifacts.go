package jepsen

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leasefence/leasefence/jepsen/history"
	"github.com/leasefence/leasefence/jepsen/report"
)

import ()

// RegenerateArtifacts writes a stored run's plots, linearizability.html
// and report.html again from h and the folder's nemesis.jsonl; report.html
// shows the results of the run's summary.json (it is skipped when there is
// none), not those of a re-check.
func RegenerateArtifacts(dir string, h []history.Record) error {
	b, err := os.ReadFile(filepath.Join(dir, "nemesis.jsonl"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	faults, err := history.ReadFaults(b)
	if err != nil {
		return err
	}
	var sum Summary
	sb, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		_, lerr := report.WriteLinearizability(filepath.Join(dir, report.LinearizabilityFile), h, faults, report.LinVisualTimeout)
		return errors.Join(report.WritePlots(dir, h, faults), lerr)
	}
	if err := json.Unmarshal(sb, &sum); err != nil {
		return fmt.Errorf("summary.json: %w", err)
	}
	return report.WriteReport(filepath.Join(dir, "report.html"), sum.reportRun(), h, faults)
}
