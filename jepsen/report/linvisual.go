package report

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/history"
)

// LinearizabilityFile is porcupine's visualization of a run's
// linearizability workload (WriteLinearizability).
const LinearizabilityFile = "linearizability.html"

// FaultAnnotations turns nemesis.jsonl's faults into porcupine
// annotations, one row per nemesis kind, each interval from start to heal
// (to the end of the history when never healed), its target and what was
// observed in the tooltip.
func FaultAnnotations(faults []history.Fault, end int64) []porcupine.Annotation {
	var out []porcupine.Annotation
	for _, f := range faultSpans(faults, end) {
		c := faultColor(f.kind)
		c.A = 0xff
		desc := f.label
		if !f.effective {
			desc += " (not effective)"
		}
		out = append(out, porcupine.Annotation{
			Tag:             "nemesis " + f.kind,
			Start:           f.start,
			End:             f.end,
			Description:     desc,
			Details:         fmt.Sprintf("%s %s for %v, effective %v: %s", f.kind, f.target, time.Duration(f.end-f.start).Round(time.Millisecond), f.effective, f.detail),
			BackgroundColor: fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B),
		})
	}
	return out
}

// WriteLinearizability writes porcupine's visualization of the
// linearizability workload of h (LinearizabilityInfo) to path, with the
// faults as annotations. It returns porcupine's result; a history without
// that workload writes nothing and returns ("", nil).
func WriteLinearizability(path string, h []history.Record, faults []history.Fault, timeout time.Duration) (porcupine.CheckResult, error) {
	if len(checker.LinOperations(h)) == 0 {
		return "", nil
	}
	model, result, info := checker.LinearizabilityInfo(h, timeout)
	_, t1 := historySpan(h)
	info.AddAnnotations(FaultAnnotations(faults, t1))
	return result, porcupine.VisualizePath(model, info, path)
}
