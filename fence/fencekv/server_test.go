package fencekv_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencekv"
)

func startServer(t *testing.T, mut func(*fencekv.Config)) (*fencekv.Client, *fencekv.Server) {
	t.Helper()
	cfg := fencekv.DefaultConfig()
	cfg.DataFile = filepath.Join(t.TempDir(), "kv.db")
	cfg.Logger = hclog.NewNullLogger()
	if mut != nil {
		mut(&cfg)
	}
	s, err := fencekv.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		s.Close()
	})
	return &fencekv.Client{BaseURL: hs.URL, HTTP: hs.Client()}, s
}

func tok(scope string, v uint64) fence.Token { return fence.Token{Scope: scope, Value: v} }

func TestStaleWriteIsRefusedAndAudited(t *testing.T) {
	c, _ := startServer(t, nil)
	ctx := context.Background()
	if _, err := c.Put(ctx, "jobs/42", tok("jobs/42", 72), []byte("from B")); err != nil {
		t.Fatal(err)
	}
	_, err := c.Put(ctx, "jobs/42", tok("jobs/42", 71), []byte("from A"))
	var st *fence.StaleTokenError
	if !errors.As(err, &st) || st.Highest != 72 || st.Presented != 71 {
		t.Fatalf("stale put: %v", err)
	}
	v, h, err := c.Get(ctx, "jobs/42")
	if err != nil || string(v) != "from B" || h != 72 {
		t.Fatalf("Get = %q, %d, %v; want from B, 72", v, h, err)
	}
	recs, err := c.AuditAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Outcome != fencekv.OutcomeAccepted || recs[1].Outcome != fencekv.OutcomeStale ||
		recs[1].Token != 71 || recs[1].Highest != 72 || recs[1].Digest == recs[0].Digest || !recs[1].Fenced {
		t.Fatalf("audit = %+v", recs)
	}
}

func TestUnfencedStoreAcceptsStaleWriteButAuditsIt(t *testing.T) {
	c, _ := startServer(t, func(c *fencekv.Config) { c.Unfenced = true })
	ctx := context.Background()
	if _, err := c.Put(ctx, "k", tok("k", 72), []byte("from B")); err != nil {
		t.Fatal(err)
	}
	rec, err := c.Put(ctx, "k", tok("k", 71), []byte("from A"))
	if err != nil {
		t.Fatalf("unfenced store refused: %v", err)
	}
	if rec.Outcome != fencekv.OutcomeAccepted || rec.Highest != 72 || rec.Fenced {
		t.Fatalf("record %+v", rec)
	}
	if v, h, _ := c.Get(ctx, "k"); string(v) != "from A" || h != 72 {
		t.Fatalf("value %q highest %d: the stale write should have overwritten", v, h)
	}
}

func TestWriteRefusalsGetTheirStatus(t *testing.T) {
	c, _ := startServer(t, nil)
	ctx := context.Background()
	if _, err := c.Put(ctx, "k", tok("k", 5), []byte("v")); err != nil {
		t.Fatal(err)
	}
	for header, want := range map[string]int{
		"":      http.StatusBadRequest, // missing
		"k":     http.StatusBadRequest, // malformed
		"k=x":   http.StatusBadRequest,
		"k=0":   http.StatusBadRequest,
		"j=9":   http.StatusBadRequest, // another scope cannot authorize k
		"k=4":   http.StatusConflict,   // stale
		"k=5":   http.StatusOK,         // equal: many writes per lease
		"k%3=1": http.StatusBadRequest,
	} {
		resp, err := c.PutUnchecked(ctx, "k", header, []byte("w"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Fencing-Token %q: %d %s, want %d", header, resp.StatusCode, b, want)
		}
	}
	recs, _ := c.AuditAll(ctx)
	if len(recs) != 9 {
		t.Fatalf("%d audit records, want 9 (every write, refused or not)", len(recs))
	}
}

func TestAppendBuildsAList(t *testing.T) {
	c, _ := startServer(t, func(c *fencekv.Config) { c.Scope = "list" })
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		if _, err := c.Append(ctx, "l/1", tok("list", uint64(i)), []byte(strconv.Itoa(i)+" ")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Append(ctx, "l/2", tok("list", 2), []byte("x")); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("append to another key of the shared scope with an old token: %v", err)
	}
	if v, _, _ := c.Get(ctx, "l/1"); string(v) != "1 2 3 " {
		t.Fatalf("list = %q", v)
	}
	if _, _, err := c.Get(ctx, "l/2"); !errors.Is(err, fencekv.ErrNotFound) {
		t.Fatalf("Get(l/2) = %v, want ErrNotFound", err)
	}
}

// Many writers over HTTP with random tokens: in audit order, the accepted
// tokens of each key never decrease, each refusal names a higher accepted
// token, and the final value is the last accepted write's.
func TestConcurrentWritersKeepTokenOrderInTheAudit(t *testing.T) {
	c, _ := startServer(t, nil)
	ctx := context.Background()
	keys := []string{"a", "b"}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; i < 20; i++ {
				k := keys[r.IntN(len(keys))]
				v := uint64(1 + i + r.IntN(6))
				_, err := c.Append(ctx, k, tok(k, v), []byte(strconv.FormatUint(v, 10)+","))
				if err != nil && !errors.Is(err, fence.ErrStaleToken) {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	recs, err := c.AuditAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 160 {
		t.Fatalf("%d audit records, want 160", len(recs))
	}
	last := map[string]uint64{}
	list := map[string]string{}
	accepted := map[string]map[uint64]bool{"a": {}, "b": {}}
	stale := 0
	for i, r := range recs {
		if r.Seq != uint64(i+1) {
			t.Fatalf("audit seq %d at position %d", r.Seq, i)
		}
		switch r.Outcome {
		case fencekv.OutcomeAccepted:
			if r.Token < last[r.Key] {
				t.Fatalf("key %s accepted %d after %d", r.Key, r.Token, last[r.Key])
			}
			last[r.Key] = r.Token
			accepted[r.Key][r.Token] = true
			list[r.Key] += strconv.FormatUint(r.Token, 10) + ","
		case fencekv.OutcomeStale:
			stale++
			if r.Highest <= r.Token || r.Highest != last[r.Key] {
				t.Fatalf("refusal %+v: highest must be the last accepted %d and above the token", r, last[r.Key])
			}
		default:
			t.Fatalf("record %+v", r)
		}
	}
	if stale == 0 {
		t.Fatal("no refusal: the test exercised nothing")
	}
	for _, k := range keys {
		v, h, err := c.Get(ctx, k)
		if err != nil || string(v) != list[k] || h != last[k] {
			t.Fatalf("key %s = %q (highest %d), audit says %q (%d)", k, v, h, list[k], last[k])
		}
	}
}

func TestConfigValidateRefusesNonsense(t *testing.T) {
	for name, c := range map[string]fencekv.Config{
		"no listen": {DataFile: "x"},
		"no file":   {Listen: ":0"},
		"bad rule":  {Listen: ":0", DataFile: "x", Rule: 7},
		"bad scope": {Listen: ":0", DataFile: "x", Scope: "a\x00"},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
}
