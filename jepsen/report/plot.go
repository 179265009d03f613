package report

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/history"
)

// Plot files of a results folder (WritePlots).
const (
	LatencyPNG    = "latency.png"
	ThroughputPNG = "throughput.png"
	TimelinePNG   = "timeline.png"
)

// PlotFiles lists the PNG files WritePlots writes, in the order a reader
// should look at them.
var PlotFiles = []string{TimelinePNG, LatencyPNG, ThroughputPNG}

// faultSpan is one fault from its start to its heal (or to the end of the
// history when nemesis.jsonl has no heal for it).
type faultSpan struct {
	// detail is the heal's (what was observed), else the start's; label
	// names the target, or for a fault without one (a partition) the
	// start of the start's detail ("minority n1" of "minority n1 |
	// majority n2,n3; ...").
	kind, target, detail, label string
	start, end                  int64
	effective                   bool
}

// faultSpans pairs nemesis.jsonl's starts and heals by kind and target;
// a start never healed ends at end.
func faultSpans(faults []history.Fault, end int64) []faultSpan {
	open := map[string]int{}
	var out []faultSpan
	for _, f := range faults {
		key := f.Kind + "/" + f.Target
		if f.Phase == "start" {
			open[key] = len(out)
			label := f.Target
			if label == "" {
				label, _, _ = strings.Cut(f.Detail, ";")
				label, _, _ = strings.Cut(label, " | ")
				label = checker.Shorten(label, 32)
			}
			out = append(out, faultSpan{kind: f.Kind, target: f.Target, detail: f.Detail, label: label, start: f.TimeNs, end: end})
			continue
		}
		i, ok := open[key]
		if !ok {
			continue
		}
		delete(open, key)
		out[i].end, out[i].effective = f.TimeNs, f.Effective
		if f.Detail != "" {
			out[i].detail = f.Detail
		}
	}
	return out
}

// faultColor is a light colour per nemesis kind, stable across runs.
func faultColor(kind string) color.NRGBA {
	switch {
	case strings.HasPrefix(kind, "kill"):
		return color.NRGBA{R: 0xf4, G: 0xa6, B: 0xa6, A: 0x70}
	case kind == history.NemClientPause, kind == history.NemClientPauseAcquire, kind == history.NemClientPauseReplay:
		return color.NRGBA{R: 0xa6, G: 0xb8, B: 0xf4, A: 0x70}
	case strings.HasPrefix(kind, "pause"):
		return color.NRGBA{R: 0xf4, G: 0xe0, B: 0x8a, A: 0x80}
	case strings.HasPrefix(kind, "partition"):
		return color.NRGBA{R: 0xc8, G: 0xa6, B: 0xf4, A: 0x70}
	case strings.HasPrefix(kind, "net"):
		return color.NRGBA{R: 0xa6, G: 0xe4, B: 0xd8, A: 0x80}
	case strings.HasPrefix(kind, "clock"):
		return color.NRGBA{R: 0xf4, G: 0xc8, B: 0x8a, A: 0x80}
	}
	return color.NRGBA{R: 0xc8, G: 0xc8, B: 0xc8, A: 0x70}
}

// faultShading is a plot.Plotter that shades each fault interval over the
// full height of the data area and labels it with its kind and target at
// the top (alternating two rows so neighbours do not overwrite each
// other). Add it first: plotters draw in the order they were added.
type faultShading struct {
	spans []faultSpan
	t0    int64
}

func (s faultShading) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	sty := text.Style{Color: color.NRGBA{A: 0xd0}, Font: font.From(plot.DefaultFont, 7), XAlign: draw.XLeft, YAlign: draw.YTop, Handler: p.TextHandler}
	for i, f := range s.spans {
		x0, x1 := trX(secs(f.start, s.t0)), trX(secs(f.end, s.t0))
		if x1 < x0+1 {
			x1 = x0 + 1
		}
		pts := c.ClipPolygonX([]vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}})
		c.FillPolygon(faultColor(f.kind), pts)
		if !c.ContainsX(x0) {
			continue
		}
		label := f.kind + " " + f.label
		if !f.effective {
			label += " (not effective)"
		}
		y := c.Max.Y - 2 - vg.Length(i%2)*9
		c.FillText(sty, vg.Point{X: x0 + 1, Y: y}, label)
	}
}

func secs(ns, t0 int64) float64 { return float64(ns-t0) / 1e9 }

// historySpan returns the first and last time of the history (0, 1 for
// one without times).
func historySpan(h []history.Record) (t0, t1 int64) {
	for _, r := range h {
		if r.TimeNs == 0 {
			continue
		}
		if t0 == 0 || r.TimeNs < t0 {
			t0 = r.TimeNs
		}
		if r.TimeNs > t1 {
			t1 = r.TimeNs
		}
	}
	if t1 <= t0 {
		t1 = t0 + 1
	}
	return t0, t1
}

// opStyle is each operation type's colour and shape, shared by the plots.
var opStyle = map[string]draw.GlyphStyle{
	history.OpAcquire: {Color: color.NRGBA{R: 0x4e, G: 0x79, B: 0xa7, A: 0xc0}, Radius: 2, Shape: draw.CircleGlyph{}},
	history.OpWrite:   {Color: color.NRGBA{R: 0x59, G: 0xa1, B: 0x4f, A: 0xc0}, Radius: 2, Shape: draw.SquareGlyph{}},
	history.OpRenew:   {Color: color.NRGBA{R: 0xb0, G: 0x7a, B: 0xa1, A: 0xc0}, Radius: 2, Shape: draw.PyramidGlyph{}},
	history.OpRelease: {Color: color.NRGBA{R: 0xf2, G: 0x8e, B: 0x2b, A: 0xc0}, Radius: 2, Shape: draw.TriangleGlyph{}},
	history.OpRead:    {Color: color.NRGBA{R: 0x76, G: 0xb7, B: 0xb2, A: 0xc0}, Radius: 2, Shape: draw.BoxGlyph{}},
}

var opTypes = []string{history.OpAcquire, history.OpWrite, history.OpRenew, history.OpRelease, history.OpRead}

// seenUnknown says whether the client saw a completion as unknown: still
// unknown, or decided only afterwards from the Raft logs.
func seenUnknown(r history.Record) bool { return r.Result == history.Unknown || r.ResolvedFrom != "" }

// WritePlots writes latency.png, throughput.png and timeline.png into dir
// from a history (resolved.jsonl when there is one) and nemesis.jsonl's
// faults, each with the fault intervals shaded and labelled. Times are
// seconds since the history's first record. It returns the first error
// and still tries every plot.
func WritePlots(dir string, h []history.Record, faults []history.Fault) error {
	t0, t1 := historySpan(h)
	spans := faultSpans(faults, t1)
	var errs []error
	for name, mk := range map[string]func([]history.Record, []faultSpan, int64, int64) (*plot.Plot, vg.Length, error){
		LatencyPNG: latencyPlot, ThroughputPNG: throughputPlot, TimelinePNG: timelinePlot,
	} {
		p, height, err := mk(h, spans, t0, t1)
		if err == nil {
			err = p.Save(12*vg.Inch, height, filepath.Join(dir, name))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// newTimePlot is a plot with the time axis from 0 to the end of the
// history (or of the last fault) and the faults shaded.
func newTimePlot(title string, spans []faultSpan, t0, t1 int64) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time since start (s)"
	end := t1
	for _, f := range spans {
		end = max(end, f.end)
	}
	p.X.Min, p.X.Max = 0, secs(end, t0)
	p.Add(faultShading{spans: spans, t0: t0})
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Legend.ThumbnailWidth = vg.Points(10)
	// The legend is placed on the whole canvas: below the title and the
	// fault labels.
	p.Legend.YOffs = -vg.Points(38)
	return p
}

// latencyPlot: every completed operation at its completion time, its
// latency on a log axis, by type; unknown outcomes (as the client saw
// them) as black crosses whatever their type.
func latencyPlot(h []history.Record, spans []faultSpan, t0, t1 int64) (*plot.Plot, vg.Length, error) {
	p := newTimePlot("operation latency (unknown outcomes: crosses)", spans, t0, t1)
	p.Y.Label.Text = "latency (ms, log)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	inv := map[string]int64{}
	pts := map[string]plotter.XYs{}
	var unknown plotter.XYs
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range h {
		if r.Worker == "" || r.Type == history.OpEvent || r.Type == history.OpWatchGap {
			continue
		}
		switch r.Kind {
		case history.Invoke:
			inv[r.Op] = r.TimeNs
		case history.Complete:
			start, ok := inv[r.Op]
			if !ok {
				continue
			}
			ms := max(float64(r.TimeNs-start)/1e6, 0.01) // a log axis has no 0
			lo, hi = min(lo, ms), max(hi, ms)
			xy := plotter.XY{X: secs(r.TimeNs, t0), Y: ms}
			if seenUnknown(r) {
				unknown = append(unknown, xy)
				continue
			}
			pts[r.Type] = append(pts[r.Type], xy)
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10 // nothing completed: an empty plot with a sane axis
	}
	for _, t := range opTypes {
		if len(pts[t]) == 0 {
			continue
		}
		s, err := plotter.NewScatter(pts[t])
		if err != nil {
			return nil, 0, err
		}
		s.GlyphStyle = opStyle[t]
		p.Add(s)
		p.Legend.Add(fmt.Sprintf("%s (%d)", t, len(pts[t])), s)
	}
	if len(unknown) > 0 {
		s, err := plotter.NewScatter(unknown)
		if err != nil {
			return nil, 0, err
		}
		s.GlyphStyle = draw.GlyphStyle{Color: color.Black, Radius: 3, Shape: draw.CrossGlyph{}}
		p.Add(s)
		p.Legend.Add(fmt.Sprintf("unknown (%d)", len(unknown)), s)
	}
	p.Y.Min, p.Y.Max = lo/1.5, hi*40 // headroom for the legend and the fault labels
	return p, 5 * vg.Inch, nil
}

// throughputPlot: acknowledged (ok, not resolved afterwards) completions
// per second per type, in 1 s buckets by completion time.
func throughputPlot(h []history.Record, spans []faultSpan, t0, t1 int64) (*plot.Plot, vg.Length, error) {
	p := newTimePlot("throughput: ok operations per second (1 s buckets)", spans, t0, t1)
	p.Y.Label.Text = "ok ops/s"
	p.Y.Min = 0
	n := int((t1-t0)/1e9) + 1
	counts := map[string][]float64{}
	for _, r := range h {
		if r.Kind != history.Complete || r.Result != history.OK || r.ResolvedFrom != "" || r.Worker == "" || opStyle[r.Type].Shape == nil {
			continue
		}
		if counts[r.Type] == nil {
			counts[r.Type] = make([]float64, n)
		}
		counts[r.Type][int((r.TimeNs-t0)/1e9)]++
	}
	for _, t := range opTypes {
		c := counts[t]
		if c == nil {
			continue
		}
		xys := make(plotter.XYs, n+1)
		for i := range xys {
			xys[i].X = float64(i)
			xys[i].Y = c[min(i, n-1)] // the last step is drawn to the end of its bucket
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, 0, err
		}
		l.StepStyle = plotter.PostStep
		clr := opStyle[t].Color.(color.NRGBA)
		clr.A = 0xff
		l.Color = clr
		l.Width = vg.Points(1.2)
		p.Add(l)
		total := 0.0
		for _, v := range c {
			total += v
		}
		p.Legend.Add(fmt.Sprintf("%s (%.0f ok)", t, total), l)
	}
	p.Y.Max *= 1.6 // room for the legend and the fault labels
	return p, 4 * vg.Inch, nil
}

// workerColors colour safe-window bars by holder.
var workerColors = []color.NRGBA{
	{0x4e, 0x79, 0xa7, 0xff}, {0xf2, 0x8e, 0x2b, 0xff}, {0x59, 0xa1, 0x4f, 0xff}, {0xb0, 0x7a, 0xa1, 0xff}, {0x76, 0xb7, 0xb2, 0xff},
	{0xed, 0xc9, 0x48, 0xff}, {0xff, 0x9d, 0xa7, 0xff}, {0x9c, 0x75, 0x5f, 0xff}, {0xba, 0xb0, 0xac, 0xff},
}

// windowBars draws the safe windows as bars in their resource's lane,
// each labelled with its token when there is room.
type windowBars struct {
	windows []checker.Window
	lanes   map[string]int
	t0      int64
}

func (b windowBars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	sty := text.Style{Color: color.White, Font: font.From(plot.DefaultFont, 7), XAlign: draw.XLeft, YAlign: draw.YCenter, Handler: p.TextHandler}
	for _, w := range b.windows {
		if w.End <= w.Start {
			continue
		}
		lane := float64(b.lanes[w.Resource])
		x0, x1 := trX(secs(w.Start, b.t0)), trX(secs(w.End, b.t0))
		y0, y1 := trY(lane-0.3), trY(lane+0.3)
		clr := workerColors[workerIndex(w.Worker)%len(workerColors)]
		c.FillPolygon(clr, c.ClipPolygonX([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}))
		label := fmt.Sprint(w.Token)
		if x1-x0 > sty.Width(label)+2 && c.ContainsX(x0) {
			c.FillText(sty, vg.Point{X: x0 + 1, Y: trY(lane)}, label)
		}
	}
}

func (b windowBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = math.Inf(1), math.Inf(-1)
	for _, w := range b.windows {
		xmin, xmax = min(xmin, secs(w.Start, b.t0)), max(xmax, secs(w.End, b.t0))
	}
	return xmin, xmax, -0.6, float64(len(b.lanes)) - 0.4
}

// timelinePlot: one lane per resource with its holders' client safe
// windows (SafeWindows; bars coloured by worker, token inside), the fenced
// writes' completions above the bars (accepted, refused, unknown), and
// the faults shaded. The picture to look at first.
func timelinePlot(h []history.Record, spans []faultSpan, t0, t1 int64) (*plot.Plot, vg.Length, error) {
	p := newTimePlot("holders' safe windows (bars, token inside) and fenced writes per resource", spans, t0, t1)
	windows := checker.SafeWindows(h)
	lanes := map[string]int{}
	var names []string
	add := func(res string) {
		if _, ok := lanes[res]; !ok && res != "" {
			lanes[res] = 0
			names = append(names, res)
		}
	}
	for _, w := range windows {
		add(w.Resource)
	}
	for _, r := range h {
		if r.Type == history.OpWrite && r.Kind == history.Complete {
			add(r.Resource)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names))) // first resource on top
	var ticks plot.ConstantTicks
	for i, n := range names {
		lanes[n] = i
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: n})
	}
	p.Y.Tick.Marker = ticks
	p.Add(windowBars{windows: windows, lanes: lanes, t0: t0})
	marks := map[string]plotter.XYs{}
	for _, r := range h {
		if r.Type != history.OpWrite || r.Kind != history.Complete {
			continue
		}
		outcome := r.Result
		if seenUnknown(r) {
			outcome = history.Unknown
		}
		marks[outcome] = append(marks[outcome], plotter.XY{X: secs(r.TimeNs, t0), Y: float64(lanes[r.Resource]) + 0.4})
	}
	for _, m := range []struct {
		outcome, label string
		sty            draw.GlyphStyle
	}{
		{history.OK, "write accepted", draw.GlyphStyle{Color: color.NRGBA{G: 0x90, A: 0xff}, Radius: 2.5, Shape: draw.CircleGlyph{}}},
		{history.Fail, "write refused", draw.GlyphStyle{Color: color.NRGBA{R: 0xd0, A: 0xff}, Radius: 3, Shape: draw.CrossGlyph{}}},
		{history.Unknown, "write unknown", draw.GlyphStyle{Color: color.NRGBA{R: 0x60, G: 0x60, B: 0x60, A: 0xff}, Radius: 3, Shape: draw.RingGlyph{}}},
	} {
		if len(marks[m.outcome]) == 0 {
			continue
		}
		s, err := plotter.NewScatter(marks[m.outcome])
		if err != nil {
			return nil, 0, err
		}
		s.GlyphStyle = m.sty
		p.Add(s)
		p.Legend.Add(fmt.Sprintf("%s (%d)", m.label, len(marks[m.outcome])), s)
	}
	// A band above the lanes for the fault labels and the legend.
	p.Y.Min, p.Y.Max = -0.6, float64(len(names))+0.9
	p.Legend.Left = false
	return p, vg.Length(1.6+0.55*float64(max(len(names), 1))) * vg.Inch, nil
}
