package runner

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Seconds is a duration reported in seconds (JSON: a number).
type Seconds float64

// Result is one workload's measurement. Latencies are in milliseconds.
type Result struct {
	// System is what was measured: "leasefence" or "etcd".
	System   string `json:"system"`
	Workload string `json:"workload"`
	// Clients is the number of concurrent workers (for renew: clients,
	// each with its own keep-alive stream).
	Clients  int     `json:"clients"`
	Warmup   Seconds `json:"warmup_s"`
	Duration Seconds `json:"duration_s"`
	// Elapsed is the measured window as it really ran: from its start to
	// the end of the last operation started inside it.
	Elapsed float64 `json:"elapsed_s"`
	// Ops counts successful operations (for acquire-release and etcd's
	// cycle: whole cycles) started inside the window.
	Ops       int64   `json:"ops"`
	OpsPerSec float64 `json:"ops_per_s"`
	// Refused counts domain refusals (resource held), apart from Ops.
	Refused       int64   `json:"refused"`
	RefusedPerSec float64 `json:"refused_per_s"`
	// Errors counts failed operations; FirstError is the first of them.
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// Latency of the successful operations, RefusedLatency of refusals.
	Latency        Latency  `json:"latency_ms"`
	RefusedLatency *Latency `json:"refused_latency_ms,omitempty"`
	// Kinds breaks a mixed workload down by operation kind.
	Kinds []KindResult `json:"kinds,omitempty"`
	// Extra holds workload-specific figures (renewals/s, leases, ...).
	Extra map[string]float64 `json:"extra,omitempty"`
	// Notes says how to read the figures (what one op is).
	Notes string `json:"notes,omitempty"`
}

// Latency summarizes an HDR histogram, in milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99_9"`
	Max   float64 `json:"max"`
}

// KindResult is one kind of operation of a mixed workload.
type KindResult struct {
	Name      string  `json:"name"`
	Ops       int64   `json:"ops"`
	OpsPerSec float64 `json:"ops_per_s"`
	Refused   int64   `json:"refused"`
	Latency   Latency `json:"latency_ms"`
}

// Report writes rs as a table, or as one JSON object per line when asJSON.
func Report(w io.Writer, rs []*Result, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, r := range rs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tworkload\tclients\tops\tops/s\trefused/s\terrors\tp50 ms\tp90 ms\tp99 ms\tp99.9 ms\tmax ms\t")
	for _, r := range rs {
		row(tw, r.System, r.Workload, r.Clients, r.Ops, r.OpsPerSec, r.RefusedPerSec, r.Errors, r.Latency)
		if r.RefusedLatency != nil {
			row(tw, "", "  (refused)", r.Clients, r.Refused, r.RefusedPerSec, 0, 0, *r.RefusedLatency)
		}
		for _, k := range r.Kinds {
			row(tw, "", "  "+k.Name, r.Clients, k.Ops, k.OpsPerSec, float64(k.Refused)/r.Elapsed, 0, k.Latency)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	notes := map[string]bool{}
	for _, r := range rs {
		if len(r.Extra) > 0 {
			keys := make([]string, 0, len(r.Extra))
			for k := range r.Extra {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var parts []string
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s=%.6g", k, r.Extra[k]))
			}
			fmt.Fprintf(w, "%s %s: %s\n", r.System, r.Workload, strings.Join(parts, " "))
		}
		if r.FirstError != "" {
			fmt.Fprintf(w, "%s %s: first error: %s\n", r.System, r.Workload, r.FirstError)
		}
		if r.Notes != "" && !notes[r.System+r.Workload] {
			notes[r.System+r.Workload] = true
			fmt.Fprintf(w, "%s %s: %s\n", r.System, r.Workload, r.Notes)
		}
	}
	return nil
}

func row(w io.Writer, system, workload string, clients int, ops int64, opsPerSec, refusedPerSec float64, errs int64, l Latency) {
	lat := "-\t-\t-\t-\t-"
	if l.Count > 0 {
		lat = fmt.Sprintf("%.3f\t%.3f\t%.3f\t%.3f\t%.3f", l.P50, l.P90, l.P99, l.P999, l.Max)
	}
	fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%.0f\t%.0f\t%d\t%s\t\n",
		system, workload, clients, ops, opsPerSec, refusedPerSec, errs, lat)
}

// Secs converts a duration for Result.
func Secs(d time.Duration) Seconds { return Seconds(d.Seconds()) }
