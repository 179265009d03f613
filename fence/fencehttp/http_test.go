package fencehttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencebolt"
	"github.com/leasefence/leasefence/fence/fencehttp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestHandlerGivesEachCaseItsStatus(t *testing.T) {
	guard := fence.NewMemory(fence.AtLeast)
	var seen fence.Token
	srv := httptest.NewServer(fencehttp.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, _ = fence.FromContext(r.Context())
		io.WriteString(w, "ok")
	}), fencehttp.WithGuard(guard)))
	defer srv.Close()

	do := func(headers ...string) (*http.Response, respBody) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/x", strings.NewReader("v"))
		for _, h := range headers {
			req.Header.Add(fencehttp.Header, h)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, respBody(b)
	}
	if resp, body := do("jobs/42=72"); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("fresh token: %d %s", resp.StatusCode, body)
	}
	if seen != (fence.Token{Scope: "jobs/42", Value: 72}) {
		t.Fatalf("handler saw token %+v", seen)
	}
	cases := []struct {
		name    string
		headers []string
		status  int
		code    string
	}{
		{"missing", nil, 400, fencehttp.CodeMissingToken},
		{"empty", []string{""}, 400, fencehttp.CodeMissingToken},
		{"no scope", []string{"72"}, 400, fencehttp.CodeMalformedToken},
		{"not a number", []string{"jobs/42=x"}, 400, fencehttp.CodeMalformedToken},
		{"zero", []string{"jobs/42=0"}, 400, fencehttp.CodeMalformedToken},
		{"two headers", []string{"jobs/42=72", "jobs/42=73"}, 400, fencehttp.CodeMalformedToken},
		{"stale", []string{"jobs/42=71"}, 409, fencehttp.CodeStaleToken},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, raw := do(c.headers...)
			var body fencehttp.ErrorBody
			if err := json.Unmarshal([]byte(raw), &body); err != nil {
				t.Fatalf("body %q is not JSON: %v", raw, err)
			}
			if resp.StatusCode != c.status || body.Error != c.code || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("got %d %+v, want %d %s", resp.StatusCode, body, c.status, c.code)
			}
			if c.code == fencehttp.CodeStaleToken && (body.Scope != "jobs/42" || body.Presented != 71 || body.Highest != 72) {
				t.Fatalf("stale body %+v", body)
			}
		})
	}
}

type respBody string

func TestTransportSendsTokenAndResponseErrorTypesTheRefusal(t *testing.T) {
	guard := fence.NewMemory(fence.Strict)
	srv := httptest.NewServer(fencehttp.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), fencehttp.WithGuard(guard)))
	defer srv.Close()
	hc := &http.Client{Transport: &fencehttp.Transport{Base: srv.Client().Transport}}
	ctx := fence.NewContext(context.Background(), fence.Token{Scope: "a=b ü%", Value: 4})
	send := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := fencehttp.ResponseError(resp); err != nil {
			return err
		}
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return nil
	}
	if err := send(ctx); err != nil {
		t.Fatalf("first: %v", err)
	}
	err := send(ctx)
	var st *fence.StaleTokenError
	if !errors.As(err, &st) || *st != (fence.StaleTokenError{Scope: "a=b ü%", Presented: 4, Highest: 4}) {
		t.Fatalf("second: %v, want stale 4/4", err)
	}
	if err := send(context.Background()); !errors.Is(err, fence.ErrNoToken) {
		t.Fatalf("without token: %v, want ErrNoToken", err)
	}
}

// A handler may apply its effect and then answer an error. Its token must
// still be recorded, or an older holder would be admitted after the effect:
// 70 ok, 72 applies and answers 500, then 71 must be refused.
func TestTokenIsRecordedWhenTheHandlerRanWhateverItAnswered(t *testing.T) {
	guard := fence.NewMemory(fence.AtLeast)
	var effects []uint64
	h := fencehttp.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := fence.FromContext(r.Context())
		effects = append(effects, tok.Value)
		if tok.Value == 72 {
			http.Error(w, "effect applied, then the reply failed", http.StatusInternalServerError)
		}
	}), fencehttp.WithGuard(guard))
	send := func(v uint64) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPut, "/", nil)
		fencehttp.SetToken(req.Header, fence.Token{Scope: "s", Value: v})
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if c := send(70); c != 200 {
		t.Fatalf("70: %d", c)
	}
	if c := send(72); c != 500 {
		t.Fatalf("72: status %d, want the handler's 500", c)
	}
	if c := send(71); c != http.StatusConflict {
		t.Fatalf("71 after 72's effect: status %d, want 409", c)
	}
	if len(effects) != 2 || guard.Highest("s") != 72 {
		t.Fatalf("effects %v, highest %d", effects, guard.Highest("s"))
	}
}

// A handler may apply its effect and then panic: httputil.ReverseProxy
// panics with http.ErrAbortHandler when copying the reply fails after the
// upstream applied the request. net/http recovers and keeps serving, so the
// token must be recorded anyway: 70 ok, 72 applies and panics, then 71 must
// be refused and its effect never applied. Run on a real server, with a
// memory guard (which skips the record on a panic) and a bbolt guard (which
// rolls it back).
func TestTokenIsRecordedWhenTheHandlerPanicsAfterItsEffect(t *testing.T) {
	guards := []struct {
		name string
		new  func(t *testing.T) fence.Guard
	}{
		{"memory", func(*testing.T) fence.Guard { return fence.NewMemory(fence.AtLeast) }},
		{"bbolt", func(t *testing.T) fence.Guard {
			db, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			g, err := fencebolt.New(db)
			if err != nil {
				t.Fatal(err)
			}
			return g
		}},
	}
	for _, gc := range guards {
		t.Run(gc.name, func(t *testing.T) {
			var (
				mu      sync.Mutex
				effects []uint64
			)
			srv := httptest.NewServer(fencehttp.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tok, _ := fence.FromContext(r.Context())
				mu.Lock()
				effects = append(effects, tok.Value)
				mu.Unlock()
				if tok.Value == 72 {
					panic(http.ErrAbortHandler) // effect applied, then the reply failed
				}
			}), fencehttp.WithGuard(gc.new(t))))
			defer srv.Close()
			send := func(v uint64) (int, error) {
				req, _ := http.NewRequest(http.MethodPut, srv.URL+"/x", strings.NewReader("v"))
				fencehttp.SetToken(req.Header, fence.Token{Scope: "s", Value: v})
				resp, err := srv.Client().Do(req)
				if err != nil {
					return 0, err
				}
				defer resp.Body.Close()
				_, err = io.ReadAll(resp.Body)
				return resp.StatusCode, err
			}
			if c, err := send(70); c != 200 || err != nil {
				t.Fatalf("70: %d %v", c, err)
			}
			if c, err := send(72); err == nil {
				t.Fatalf("72: status %d, want the aborted connection", c)
			}
			if c, err := send(71); c != http.StatusConflict {
				t.Fatalf("71 after 72's effect: status %d (%v), want 409", c, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if slices.Contains(effects, 71) {
				t.Fatalf("effects %v: 71 acted after 72", effects)
			}
		})
	}
}

// The middleware re-raises a handler's panic with the same value, so
// net/http still sees http.ErrAbortHandler (abort quietly) or logs any
// other panic.
func TestHandlerPanicReachesTheServerUnchanged(t *testing.T) {
	guard := fence.NewMemory(fence.AtLeast)
	h := fencehttp.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler)
	}), fencehttp.WithGuard(guard))
	req := httptest.NewRequest(http.MethodPut, "/", nil)
	fencehttp.SetToken(req.Header, fence.Token{Scope: "s", Value: 5})
	func() {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Fatalf("recovered %v, want http.ErrAbortHandler", p)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), req)
	}()
	if h := guard.Highest("s"); h != 5 {
		t.Fatalf("highest = %d after a handler that panicked, want 5", h)
	}
}

func TestWriteErrorLeavesOtherErrorsAlone(t *testing.T) {
	rec := httptest.NewRecorder()
	if fencehttp.WriteError(rec, errors.New("other")) || fencehttp.WriteError(rec, nil) {
		t.Fatal("WriteError claimed a non-fence error")
	}
	if rec.Body.Len() != 0 {
		t.Fatal("WriteError wrote for a non-fence error")
	}
}
