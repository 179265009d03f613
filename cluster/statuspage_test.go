package cluster

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/leasefence/leasefence/api"
)

// chromium returns the path of a headless-capable Chromium, or skips the
// test where there is none; under CI=true its absence fails the test
// (.ci/run installs Debian's chromium package).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium on PATH under CI=true: .ci/run installs Debian's chromium package")
	}
	t.Skip("no chromium on PATH: apt-get install chromium to run the status page's browser test")
	return ""
}

// runChromium runs headless Chromium with args and returns its stdout.
// Chromium starts helper processes that inherit its output: on a timeout
// the whole process group is killed, and Wait gives up on the output
// after WaitDelay, so a helper left behind cannot hold the test (and the
// package's run) for ever.
func runChromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--hide-scrollbars"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Start()
	if err == nil {
		defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // helpers still running
		err = cmd.Wait()
	}
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.Bytes()
}

// table returns the rows of the table with the given id as cell texts.
func table(t *testing.T, doc *html.Node, id string) [][]string {
	t.Helper()
	var tbl *html.Node
	var find func(*html.Node)
	find = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "table" {
			for _, a := range n.Attr {
				if a.Key == "id" && a.Val == id {
					tbl = n
				}
			}
		}
		for c := n.FirstChild; c != nil && tbl == nil; c = c.NextSibling {
			find(c)
		}
	}
	find(doc)
	if tbl == nil {
		t.Fatalf("no table #%s in the page", id)
	}
	var rows [][]string
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "tr" {
			var cells []string
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				if c.Type == html.ElementNode && (c.Data == "td" || c.Data == "th") {
					cells = append(cells, strings.TrimSpace(text(c)))
				}
			}
			rows = append(rows, cells)
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(tbl)
	return rows
}

func text(n *html.Node) string {
	if n.Type == html.TextNode {
		return n.Data
	}
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		b.WriteString(text(c))
	}
	return b.String()
}

func column(rows [][]string, i int) []string {
	var out []string
	for _, r := range rows[1:] { // past the header
		if i < len(r) {
			out = append(out, r[i])
		}
	}
	return out
}

// The status page, loaded from a real node by headless Chromium: the DOM
// shows the three members, the live leases (and only those the filter
// keeps), the last events and the clock settings. The screenshot is
// written to docs/status-page.png with LEASEFENCE_UPDATE_SCREENSHOT=1.
func TestStatusPageInHeadlessChromium(t *testing.T) {
	bin := chromium(t)
	tc := newTestCluster(t, 3, func(c *Config) {
		c.MetricsListen = "127.0.0.1:0"
		c.StatusPage = true
	})
	ctx := ctxT(t)
	lc := tc.client(0)
	for _, r := range []struct{ res, holder string }{{"jobs/1", "worker-a"}, {"jobs/2", "worker-b"}, {"billing/7", "invoicer"}, {"jobs/3", "worker-c"}} {
		req := acquireReq(r.res, 30*time.Second)
		req.Holder = r.holder
		if _, err := lc.Acquire(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	got, err := lc.Get(ctx, &api.GetRequest{Resource: "jobs/3"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Release(ctx, &api.ReleaseRequest{LeaseId: got.GetLease().GetId()}); err != nil {
		t.Fatal(err)
	}
	// The page shows what the members say at that moment: on a loaded
	// machine an election may be under way, so load it until it shows a
	// settled cluster (one leader, two followers, all reachable).
	var doc *html.Node
	var page string
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, leader := tc.leader()
		page = "http://" + leader.MetricsAddr() + "/status"
		d, err := html.Parse(bytes.NewReader(runChromium(t, bin, "--dump-dom", page)))
		if err != nil {
			t.Fatal(err)
		}
		members := table(t, d, "members")
		if ids := column(members, 0); strings.Join(ids, ",") != "n1,n2,n3" {
			t.Fatalf("members %v", members)
		}
		roles := strings.Join(column(members, 3), ",")
		reach := column(members, 6)
		settled := strings.Count(roles, "leader") == 1 && strings.Count(roles, "follower") == 2
		for _, r := range reach {
			settled = settled && (strings.HasPrefix(r, "yes") || r == "self")
		}
		if settled {
			doc = d
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed one leader, two followers, all reachable: roles %q, reachable %q", roles, reach)
		}
		t.Logf("not settled yet (roles %q, reachable %q); loading again", roles, reach)
		time.Sleep(time.Second)
	}
	leases := table(t, doc, "leases")
	if res := strings.Join(column(leases, 0), ","); res != "billing/7,jobs/1,jobs/2" {
		t.Errorf("leases %q, want billing/7,jobs/1,jobs/2 (jobs/3 released)", res)
	}
	if h := strings.Join(column(leases, 3), ","); h != "invoicer,worker-a,worker-b" {
		t.Errorf("holders %q", h)
	}
	events := table(t, doc, "events")
	if kinds := strings.Join(column(events, 1), ","); !strings.HasPrefix(kinds, "released,granted") || strings.Count(kinds, "granted") != 4 {
		t.Errorf("events newest first %q: want released then the four grants", kinds)
	}
	clock := table(t, doc, "clock")
	if len(clock) < 5 || clock[2][0] != "skew margin" || clock[2][1] != "200ms" {
		t.Errorf("clock settings %v", clock)
	}

	// The filter: a plain GET form, no script.
	filtered, err := html.Parse(bytes.NewReader(runChromium(t, bin, "--dump-dom", page+"?resource="+url.QueryEscape("jobs/"))))
	if err != nil {
		t.Fatal(err)
	}
	if res := strings.Join(column(table(t, filtered, "leases"), 0), ","); res != "jobs/1,jobs/2" {
		t.Errorf("leases under jobs/: %q", res)
	}

	shot := filepath.Join(t.TempDir(), "status-page.png")
	runChromium(t, bin, "--screenshot="+shot, "--window-size=1100,900", page)
	png, err := os.ReadFile(shot)
	if err != nil || len(png) < 1000 || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot: %d bytes, %v", len(png), err)
	}
	if os.Getenv("LEASEFENCE_UPDATE_SCREENSHOT") == "1" {
		if err := os.WriteFile("../docs/status-page.png", png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// With a policy the page is an administrator's: no token or a
// non-administrator's is 403, an administrator's token opens it. Without
// Config.StatusPage there is no page at all.
func TestStatusPageRespectsThePolicyAndItsSwitch(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) {
		c.MetricsListen = "127.0.0.1:0"
		c.StatusPage = true
		c.Policy = mustPolicy(t, testPolicy)
	})
	get := func(addr, path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	addr := tc.nodes[0].MetricsAddr()
	for _, tok := range []string{"", aliceToken, "not-a-token-at-all-0000"} {
		if code, _ := get(addr, "/status", tok); code != http.StatusForbidden {
			t.Errorf("token %q: %d, want 403", tok, code)
		}
	}
	code, body := get(addr, "/status", rootToken)
	if code != 200 || !strings.Contains(body, `<table id="members">`) {
		t.Errorf("administrator: %d", code)
	}
	// The other members answer this node's status probe with
	// PermissionDenied (plaintext: no credentials): still reachable.
	if n := strings.Count(body, `<td class="yes">`); n != 3 || strings.Contains(body, `<td class="no">`) {
		t.Errorf("members reachable: %d of 3 shown so:\n%s", n, body)
	}
	if code, _ := get(addr, "/nothing-here", rootToken); code != http.StatusNotFound {
		t.Errorf("unknown path: %d, want 404", code)
	}
	if code, _ := get(addr, "/metrics", ""); code != 200 {
		t.Errorf("metrics behind the page's policy: %d", code)
	}

	off := newTestCluster(t, 1, func(c *Config) { c.MetricsListen = "127.0.0.1:0" })
	if code, _ := get(off.nodes[0].MetricsAddr(), "/status", ""); code != http.StatusNotFound {
		t.Errorf("page without StatusPage: %d, want 404", code)
	}
}
