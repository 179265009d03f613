package report

import (
	"errors"
	"fmt"
	"html"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/history"
)

// Run is what report.html says of a run besides its history and faults:
// its folder, the headline of its configuration and the checkers' verdicts
// (the top-level package's Summary gives it).
type Run struct {
	Dir                        string
	Seed                       uint64
	Nodes, Workers, Resources  int
	Nemeses                    []string
	Unfenced                   bool
	Results                    []checker.Result
	Passed, Failed, NotCounted int
}

// WriteReport writes report.html: the checker results, the plots
// (WritePlots: timeline.png, latency.png, throughput.png, written next to
// it first), a link to porcupine's visualization of the linearizability
// workload (WriteLinearizability: linearizability.html, also written
// first), then one lane per resource on a common time axis with each
// holder's client safe window (labelled with its token), each write's
// completion (green accepted, red refused, grey unknown), and the faults
// shaded with their kind. A plot or visualization that fails is named in
// the report and in the returned error; the report is still written.
func WriteReport(path string, sum Run, h []history.Record, faults []history.Fault) error {
	dir := filepath.Dir(path)
	var notes []string
	plotErr := WritePlots(dir, h, faults)
	if plotErr != nil {
		notes = append(notes, "plots: "+plotErr.Error())
	}
	lin, linErr := WriteLinearizability(filepath.Join(dir, LinearizabilityFile), h, faults, LinVisualTimeout)
	if linErr != nil {
		notes = append(notes, "linearizability visualization: "+linErr.Error())
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	writeReport(f, sum, h, faults, artifacts{dir: dir, lin: lin, notes: notes})
	if err := f.Close(); err != nil {
		return err
	}
	return errors.Join(plotErr, linErr)
}

// LinVisualTimeout bounds the second porcupine check made for the
// visualization.
const LinVisualTimeout = 60 * time.Second

// artifacts are the files written next to report.html that it shows.
type artifacts struct {
	dir string
	// lin is porcupine's result for linearizability.html ("" when the run
	// had no linearizability workload and the file was not written).
	lin   porcupine.CheckResult
	notes []string
}

// writeArtifacts links linearizability.html and shows the plots that exist.
func writeArtifacts(w io.Writer, a artifacts) {
	if a.lin != "" {
		fmt.Fprintf(w, "<p><a href='%s'>linearizability.html</a>: porcupine's visualization of the linearizability workload (jl/ resources, one partition each; faults as annotation rows), porcupine: %s</p>\n",
			LinearizabilityFile, html.EscapeString(string(a.lin)))
	}
	for _, n := range a.notes {
		fmt.Fprintf(w, "<p class=invalid>%s</p>\n", html.EscapeString(n))
	}
	for _, p := range PlotFiles {
		if _, err := os.Stat(filepath.Join(a.dir, p)); err == nil {
			fmt.Fprintf(w, "<p><a href='%s'><img src='%s' alt='%s' style='max-width:100%%'></a></p>\n", p, p, p)
		}
	}
}

// Render writes report.html's page for run to w, without the plots and
// linearizability.html that WriteReport writes next to it.
func Render(w io.Writer, run Run, h []history.Record, faults []history.Fault) {
	writeReport(w, run, h, faults, artifacts{})
}

func writeReport(w io.Writer, sum Run, h []history.Record, faults []history.Fault, a artifacts) {
	t0, t1 := historySpan(h)
	const left, width, lane = 90, 1400, 46
	x := func(ns int64) float64 {
		if ns < t0 {
			ns = t0
		}
		if ns > t1 {
			ns = t1
		}
		return left + float64(ns-t0)/float64(t1-t0)*width
	}
	windows := checker.SafeWindows(h)
	lanes := map[string]int{}
	var names []string
	for _, win := range windows {
		if _, ok := lanes[win.Resource]; !ok {
			lanes[win.Resource] = 0
			names = append(names, win.Resource)
		}
	}
	sort.Strings(names)
	for i, n := range names {
		lanes[n] = i
	}
	height := 40 + lane*len(names) + 20

	fmt.Fprintf(w, "<!doctype html><meta charset=utf-8><title>jepsen %s</title>\n", html.EscapeString(sum.Dir))
	fmt.Fprint(w, "<style>body{font:13px sans-serif;margin:16px}td,th{padding:2px 8px;text-align:left}.valid{color:#080}.invalid{color:#c00;font-weight:bold}.unknown{color:#a60}</style>\n")
	fmt.Fprintf(w, "<h1>%s</h1><p>seed %d, %d nodes, %d workers on %d resources, nemeses %s, unfenced %v</p>\n",
		html.EscapeString(sum.Dir), sum.Seed, sum.Nodes, sum.Workers, sum.Resources,
		html.EscapeString(strings.Join(sum.Nemeses, ",")), sum.Unfenced)
	fmt.Fprint(w, "<table><tr><th>checker<th>verdict<th>checked<th>anomaly<th>witness</tr>\n")
	for _, r := range sum.Results {
		fmt.Fprintf(w, "<tr><td>%s<td class=%s>%s<td>%d<td>%s<td>%s</tr>\n", r.Checker, r.Verdict, html.EscapeString(r.VerdictText()), r.Checked,
			html.EscapeString(r.Anomaly), html.EscapeString(r.Witness))
	}
	fmt.Fprintf(w, "</table><p>%d passed, %d failed%s</p>\n", sum.Passed, sum.Failed, NotCountedNote(sum.NotCounted))
	writeArtifacts(w, a)
	fmt.Fprintf(w, "<p>Safe windows per resource (bars, token inside), writes (ticks: green accepted, red refused, grey unknown), faults (shaded). Time: %.1f s.</p>\n", float64(t1-t0)/1e9)
	fmt.Fprintf(w, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d'>\n", left+width+20, height)

	// Faults.
	open := map[string]history.Fault{}
	for _, f := range faults {
		key := f.Kind + "/" + f.Target
		if f.Phase == "start" {
			open[key] = f
			continue
		}
		s, ok := open[key]
		if !ok {
			continue
		}
		delete(open, key)
		color := "#fdd"
		if strings.HasPrefix(f.Kind, history.NemClientPause) {
			color = "#ddf"
		} else if strings.HasPrefix(f.Kind, "pause") {
			color = "#ffd"
		}
		fmt.Fprintf(w, "<rect x='%.1f' y='20' width='%.1f' height='%d' fill='%s'><title>%s %s: %s</title></rect>\n",
			x(s.TimeNs), x(f.TimeNs)-x(s.TimeNs)+0.5, height-30, color, f.Kind, f.Target, html.EscapeString(s.Detail))
		fmt.Fprintf(w, "<text x='%.1f' y='14' font-size='9'>%s %s</text>\n", x(s.TimeNs), f.Kind, f.Target)
	}
	for i, n := range names {
		y := 30 + i*lane
		fmt.Fprintf(w, "<text x='4' y='%d'>%s</text><line x1='%d' x2='%d' y1='%d' y2='%d' stroke='#ccc'/>\n", y+20, html.EscapeString(n), left, left+width, y+lane-2, y+lane-2)
	}
	palette := []string{"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#bab0ac"}
	for _, win := range windows {
		if win.End <= win.Start {
			continue
		}
		y := 30 + lanes[win.Resource]*lane
		c := palette[workerIndex(win.Worker)%len(palette)]
		fmt.Fprintf(w, "<rect x='%.1f' y='%d' width='%.1f' height='22' fill='%s' opacity='.8'><title>%s token %d</title></rect>\n",
			x(win.Start), y+4, x(win.End)-x(win.Start)+0.3, c, win.Worker, win.Token)
		if x(win.End)-x(win.Start) > 14 {
			fmt.Fprintf(w, "<text x='%.1f' y='%d' font-size='9' fill='#fff'>%d</text>\n", x(win.Start)+1, y+19, win.Token)
		}
	}
	for _, r := range h {
		if r.Type != history.OpWrite || r.Kind != history.Complete {
			continue
		}
		y, ok := lanes[r.Resource]
		if !ok {
			continue
		}
		c := map[string]string{history.OK: "#080", history.Fail: "#d00", history.Unknown: "#888"}[r.Result]
		fmt.Fprintf(w, "<line x1='%.1f' x2='%.1f' y1='%d' y2='%d' stroke='%s'><title>%s %s token %d: %s %s</title></line>\n",
			x(r.TimeNs), x(r.TimeNs), 30+y*lane+28, 30+y*lane+40, c, r.Worker, r.Element, r.Token, r.Result, html.EscapeString(r.Error))
	}
	fmt.Fprint(w, "</svg>\n")
}

func workerIndex(id string) int {
	n := 0
	for _, c := range id {
		n = n*31 + int(c)
	}
	if n < 0 {
		n = -n
	}
	return n
}

// NotCountedNote is the closing line's note on results that are neither passed
// nor failed.
func NotCountedNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d not required (invalid or unknown, not counted)", n)
}
