package fencekv_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencekv"
)

var fencedkvBin string

func TestMain(m *testing.M) {
	flag.Parse()
	code := func() int {
		if !testing.Short() {
			dir, err := os.MkdirTemp("", "fencekv-bin-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			defer os.RemoveAll(dir)
			fencedkvBin = filepath.Join(dir, "fencedkv")
			out, err := exec.Command("go", "build", "-race", "-o", fencedkvBin, "github.com/leasefence/leasefence/cmd/fencedkv").CombinedOutput()
			if err != nil {
				fmt.Fprintf(os.Stderr, "building fencedkv: %v\n%s", err, out)
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

// kvProc is a real fencedkv process.
type kvProc struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{}
}

func startKV(t *testing.T, dataFile string, extra ...string) *kvProc {
	t.Helper()
	cmd := exec.Command(fencedkvBin, append([]string{"--listen", "127.0.0.1:0", "--data-file", dataFile, "--log-level", "warn"}, extra...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &kvProc{cmd: cmd, exited: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.kill(); <-p.exited })
	select {
	case line := <-lines:
		// "fencedkv serving on 127.0.0.1:PORT (fenced)"
		f := strings.Fields(line)
		if len(f) < 4 || f[2] != "on" {
			t.Fatalf("unexpected first line %q", line)
		}
		p.addr = f[3]
	case <-p.exited:
		t.Fatalf("fencedkv exited at start: %s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("fencedkv did not start within 30s")
	}
	return p
}

func (p *kvProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
}

// kill -9 in the middle of a write stream: after a restart, each key's
// highest token is the last acknowledged one (or the one in flight at the
// kill, which may have committed without its answer), its value is that
// write's, every acknowledged audit record is there, and a stale token is
// still refused.
func TestKill9LosesNothingAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	dataFile := filepath.Join(t.TempDir(), "kv.db")
	p := startKV(t, dataFile)
	c := &fencekv.Client{BaseURL: "http://" + p.addr}
	ctx := context.Background()

	type keyState struct {
		lastAck, inFlight uint64
		acked             []fencekv.AuditRecord
	}
	keys := []string{"acct/1", "acct/2", "acct/3", "acct/4"}
	states := make([]keyState, len(keys))
	var acked atomic.Int64 // kill after 150 acknowledged writes in all
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &states[i]
			for n := uint64(1); ; n++ {
				rec, err := c.Put(ctx, key, fence.Token{Scope: key, Value: n}, []byte(fmt.Sprintf("%s@%d", key, n)))
				if err != nil {
					if !errors.Is(err, fencekv.ErrIndeterminate) {
						t.Errorf("%s token %d: %v", key, n, err)
					}
					st.inFlight = n
					return
				}
				st.lastAck = n
				st.acked = append(st.acked, rec)
				if n > 2 && n%3 == 0 { // a stale writer in the stream
					if _, err := c.Put(ctx, key, fence.Token{Scope: key, Value: n - 2}, []byte("stale")); !errors.Is(err, fence.ErrStaleToken) {
						if errors.Is(err, fencekv.ErrIndeterminate) {
							return
						}
						t.Errorf("%s stale token %d: %v", key, n-2, err)
						return
					}
				}
				acked.Add(1)
			}
		}()
	}
	writersDone := make(chan struct{})
	go func() { wg.Wait(); close(writersDone) }()
	deadline := time.Now().Add(60 * time.Second)
	for acked.Load() < 150 {
		select {
		case <-writersDone:
			t.Fatalf("writers stopped after %d acknowledged writes", acked.Load())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d writes acknowledged in 60s", acked.Load())
		}
	}
	p.kill()
	wg.Wait()
	<-p.exited

	p2 := startKV(t, dataFile)
	c2 := &fencekv.Client{BaseURL: "http://" + p2.addr}
	audit, err := c2.AuditAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bySeq := map[uint64]fencekv.AuditRecord{}
	for _, r := range audit {
		bySeq[r.Seq] = r
	}
	for i, key := range keys {
		st := states[i]
		if st.lastAck == 0 {
			t.Fatalf("%s: nothing acknowledged before the kill", key)
		}
		h, err := c2.Highest(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if h != st.lastAck && !(st.inFlight != 0 && h == st.inFlight) {
			t.Fatalf("%s: highest %d after kill -9, last acknowledged %d (in flight %d)", key, h, st.lastAck, st.inFlight)
		}
		v, _, err := c2.Get(ctx, key)
		if want := fmt.Sprintf("%s@%d", key, h); err != nil || string(v) != want {
			t.Fatalf("%s: value %q, %v; want %q", key, v, err, want)
		}
		for _, rec := range st.acked {
			got, ok := bySeq[rec.Seq]
			if !ok || got.Token != rec.Token || got.Digest != rec.Digest || got.Outcome != fencekv.OutcomeAccepted {
				t.Fatalf("%s: acknowledged audit record %+v lost or changed (now %+v)", key, rec, got)
			}
		}
		if _, err := c2.Put(ctx, key, fence.Token{Scope: key, Value: h - 1}, []byte("stale after restart")); !errors.Is(err, fence.ErrStaleToken) {
			t.Fatalf("%s: token %d after restart: %v, want stale", key, h-1, err)
		}
		t.Logf("%s: %d acknowledged, highest %d after restart", key, len(st.acked), h)
	}
}
