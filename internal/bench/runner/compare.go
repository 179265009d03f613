package runner

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
)

// ReadJSON reads the JSON lines Report writes with asJSON.
func ReadJSON(r io.Reader) ([]*Result, error) {
	var out []*Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 || sc.Bytes()[0] != '{' {
			continue
		}
		var res Result
		if err := json.Unmarshal(sc.Bytes(), &res); err != nil {
			return nil, fmt.Errorf("runner: read results: %w", err)
		}
		out = append(out, &res)
	}
	return out, sc.Err()
}

// Compare writes, for every workload and client count measured on both
// systems a and b, the ratios a/b of throughput and of latency
// percentiles. Throughput above 1 and latency below 1 favour a. With
// repeated runs (rounds), the k-th run of a is paired with the k-th run of
// b, and each figure is the median over the pairs; the throughput ratio
// also shows its range (lowest–highest pair), so one lucky round cannot
// make the table.
func Compare(w io.Writer, rs []*Result, a, b string) error {
	type key struct {
		workload string
		clients  int
	}
	runs := map[string]map[key][]*Result{a: {}, b: {}}
	var order []key
	for _, r := range rs {
		m, ok := runs[r.System]
		if !ok {
			continue
		}
		k := key{r.Workload, r.Clients}
		if len(runs[a][k]) == 0 && len(runs[b][k]) == 0 {
			order = append(order, k)
		}
		m[k] = append(m[k], r)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "workload\tclients\tpairs\t%s ops/s\t%s ops/s\tops/s ratio\t(range)\tp50 ratio\tp99 ratio\tp99.9 ratio\t\n", a, b)
	for _, k := range order {
		as, bs := runs[a][k], runs[b][k]
		n := min(len(as), len(bs))
		if n == 0 {
			continue
		}
		var aOps, bOps, thr, p50, p99, p999 []float64
		for i := range n {
			x, y := as[i], bs[i]
			aOps, bOps = append(aOps, x.OpsPerSec), append(bOps, y.OpsPerSec)
			thr = appendRatio(thr, x.OpsPerSec, y.OpsPerSec)
			p50 = appendRatio(p50, x.Latency.P50, y.Latency.P50)
			p99 = appendRatio(p99, x.Latency.P99, y.Latency.P99)
			p999 = appendRatio(p999, x.Latency.P999, y.Latency.P999)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t\n", k.workload, k.clients, n,
			median(aOps), median(bOps), ratioOf(thr), spread(thr), ratioOf(p50), ratioOf(p99), ratioOf(p999))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "ratios are %s / %s, the median over the pairs: ops/s above 1 and latency below 1 favour %s\n", a, b, a)
	return err
}

func appendRatio(rs []float64, x, y float64) []float64 {
	if y == 0 {
		return rs
	}
	return append(rs, x/y)
}

// median returns the median of xs (the mean of the middle two for an even
// count), or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ratioOf(rs []float64) string {
	if len(rs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", median(rs))
}

func spread(rs []float64) string {
	if len(rs) < 2 {
		return ""
	}
	return fmt.Sprintf("%.2f–%.2f", slices.Min(rs), slices.Max(rs))
}
