package runner

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
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
// repeated runs, the k-th run of a is paired with the k-th run of b.
func Compare(w io.Writer, rs []*Result, a, b string) error {
	type key struct {
		workload string
		clients  int
	}
	bs := map[key][]*Result{}
	for _, r := range rs {
		if r.System == b {
			k := key{r.Workload, r.Clients}
			bs[k] = append(bs[k], r)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "workload\tclients\t%s ops/s\t%s ops/s\tops/s ratio\tp50 ratio\tp99 ratio\tp99.9 ratio\t\n", a, b)
	for _, r := range rs {
		k := key{r.Workload, r.Clients}
		if r.System != a || len(bs[k]) == 0 {
			continue
		}
		o := bs[k][0]
		bs[k] = bs[k][1:]
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t\n", r.Workload, r.Clients, r.OpsPerSec, o.OpsPerSec,
			ratio(r.OpsPerSec, o.OpsPerSec), ratio(r.Latency.P50, o.Latency.P50),
			ratio(r.Latency.P99, o.Latency.P99), ratio(r.Latency.P999, o.Latency.P999))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "ratios are %s / %s: ops/s above 1 and latency below 1 favour %s\n", a, b, a)
	return err
}

func ratio(x, y float64) string {
	if y == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", x/y)
}
