package demo_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasefence/leasefence/fence/fencekv"
	"github.com/leasefence/leasefence/internal/demo"
)

var binDir string

func TestMain(m *testing.M) {
	flag.Parse()
	code := func() int {
		if !testing.Short() {
			dir, err := os.MkdirTemp("", "fencedemo-bin-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			defer os.RemoveAll(dir)
			binDir = dir
			// -race as in internal/e2e, so that make test reuses the
			// race-built packages rather than compiling them twice.
			args := []string{"build", "-race", "-o", dir + "/"}
			for _, c := range []string{"leased", "fencedkv", "fencedemo"} {
				args = append(args, "github.com/leasefence/leasefence/cmd/"+c)
			}
			if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "building the demo's binaries: %v\n%s", err, out)
				return 2
			}
		}
		return m.Run()
	}()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// The demo in short form (1 s leases): with fencing, the frozen worker's
// late write is refused and B's value stays; in the unfenced control run
// the same late write overwrites B's.
func TestDemoFencingRefusesTheFrozenWorkerAndUnfencedRunLosesBsWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outs, err := demo.Run(ctx, demo.Config{BinDir: binDir, WorkDir: filepath.Join(t.TempDir(), "work"), TTL: time.Second, Out: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 2 || !outs[0].Fenced || outs[1].Fenced {
		t.Fatalf("outcomes %+v, want a fenced then an unfenced run", outs)
	}
	for _, o := range outs {
		if o.TokenB <= o.TokenA {
			t.Fatalf("B's token %d not above A's %d", o.TokenB, o.TokenA)
		}
		if len(o.Audit) != 2 || o.Audit[0].Token != o.TokenB || o.Audit[1].Token != o.TokenA {
			t.Fatalf("audit %+v: want B's write, then A's", o.Audit)
		}
	}
	f, u := outs[0], outs[1]
	if f.AWrite != demo.EvRejected || f.Final != f.ValueB || f.Audit[1].Outcome != fencekv.OutcomeStale || f.Audit[1].Highest != f.TokenB {
		t.Fatalf("fenced run: A's write %s, final %q, audit %+v; want rejected, B's value", f.AWrite, f.Final, f.Audit)
	}
	if u.AWrite != demo.EvAccepted || u.Final != u.ValueA || u.Audit[1].Outcome != fencekv.OutcomeAccepted {
		t.Fatalf("unfenced run: A's write %s, final %q; want A's stale write to overwrite B's", u.AWrite, u.Final)
	}
}
