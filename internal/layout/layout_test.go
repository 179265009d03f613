// Package layout holds the test that keeps DESIGN.md's layout table true:
// each top-level folder imports only the folders it may.
package layout

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const module = "github.com/leasefence/leasefence"

// harnessModule is the fault-injection harness, a module of its own in
// jepsen/ (with a replace to this one), so that gonum/plot and porcupine
// stay out of what importers of client and fence download. Its packages
// are held to jepsen's row.
const harnessModule = module + "/jepsen"

// allowed maps a top-level folder to the folders of ours it may depend on
// (itself and its subfolders always): a top-level folder, or a deeper path
// such as internal/dumplog that allows only that package and its
// subfolders. Folders not listed (cmd, internal) may import anything.
//
// internal/dumplog is the schema of `leased dump-log`, written by cluster
// and read by jepsen; internal/netns is the harness's namespace network,
// which internal/perf's silent-leader benchmark uses too. (jepsen's tests
// also reach cluster and fsm: resolve_dump_test.go runs Resolve over a
// real dump. Tests are not checked here.)
var allowed = map[string][]string{
	"api":       {},
	"fsm":       {"api"},
	"transport": {"api"},
	"authz":     {"fsm", "api"},
	"cluster":   {"fsm", "transport", "api", "authz", "internal/dumplog"},
	"client":    {"api"},
	"fence":     {"api"},
	"jepsen":    {"client", "fence", "api", "internal/dumplog", "internal/netns"},
}

// harnessAllowed maps a package of the harness's module (its folder under
// jepsen/) to the harness packages it may depend on (itself and its
// subfolders always): the record of a run at the bottom, the checkers
// over it, the report over both, the nemeses beside the checkers (they
// write the record and know the cluster only through interfaces of their
// own) (issue 17 item 4; etcd's tests/robustness is the model). Packages
// not listed (the top-level orchestration, cmd) may import any of them.
var harnessAllowed = map[string][]string{
	"history": {},
	"checker": {"history"},
	"report":  {"checker", "history"},
	"nemesis": {"history"},
}

// forbidden lists outside packages a folder must never reach, even
// indirectly: the FSM knows nothing of Raft or gRPC.
var forbidden = map[string][]string{
	"fsm": {"github.com/hashicorp/raft", "google.golang.org/grpc"},
	// Authorization is pure: the node takes the credentials off the
	// connection and hands them over.
	"authz": {"github.com/hashicorp/raft", "google.golang.org/grpc"},
}

// forbiddenDirect lists packages a folder must not import itself (its
// dependencies may, e.g. protobuf uses os): the FSM reads no clock source,
// network, files or randomness.
var forbiddenDirect = map[string][]string{
	"fsm": {"net", "os", "crypto/rand", "math/rand", "math/rand/v2"},
}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func TestPackagesImportOnlyWhatTheLayoutAllows(t *testing.T) {
	// Both builds: the planted defects' files (plantedbugs tag) obey the
	// same arrows as the release build.
	var out []byte
	for _, tags := range []string{"", "plantedbugs"} {
		list := func(dir, pattern string) []byte {
			t.Helper()
			cmd := exec.Command("go", "list", "-tags="+tags, "-json=ImportPath,Imports,Deps", pattern)
			cmd.Dir = dir
			o, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list -tags=%q in %q: %v", tags, dir, err)
			}
			return o
		}
		out = append(out, list("", module+"/...")...)
		// The harness's module, listed from its own directory.
		out = append(out, list(filepath.Join("..", "..", "jepsen"), "./...")...)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked, harnessChecked := 0, 0
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		top := topFolder(p.ImportPath)
		rules, ok := allowed[top]
		if !ok {
			continue
		}
		checked++
		if strings.HasPrefix(p.ImportPath, harnessModule) {
			harnessChecked++
		}
		for _, d := range p.Imports {
			if contains(forbiddenDirect[top], d) {
				t.Errorf("%s imports %s, which %s must not use", p.ImportPath, d, top)
			}
		}
		for _, d := range p.Deps {
			if f := forbiddenHit(top, d); f != "" {
				t.Errorf("%s depends on %s, which %s must never reach", p.ImportPath, d, top)
			}
			if !strings.HasPrefix(d, module+"/") {
				continue
			}
			if topFolder(d) != top && !allowedDep(rules, d) {
				t.Errorf("%s imports %s: %s may import only %v", p.ImportPath, d, top, rules)
			}
			if sub, ok := harnessSub(p.ImportPath); ok {
				if hrules, ok := harnessAllowed[sub]; ok {
					if dsub, ok := harnessSub(d); ok && dsub != sub && !contains(hrules, dsub) {
						t.Errorf("%s imports %s: jepsen/%s may import only %v of the harness", p.ImportPath, d, sub, hrules)
					}
				}
			}
		}
	}
	if checked == 0 || harnessChecked == 0 {
		t.Fatalf("%d packages checked, %d of the harness: the test would pass vacuously", checked, harnessChecked)
	}
}

// allowedDep reports whether dep (a package of ours) lies under one of
// rules' paths.
func allowedDep(rules []string, dep string) bool {
	rel := strings.TrimPrefix(dep, module+"/")
	for _, r := range rules {
		if rel == r || strings.HasPrefix(rel, r+"/") {
			return true
		}
	}
	return false
}

// TestLayoutCheckCatchesAWrongArrow shows the check can fail: an fsm
// package that depended on cluster and net would be reported.
func TestLayoutCheckCatchesAWrongArrow(t *testing.T) {
	if contains(allowed["fsm"], topFolder(module+"/cluster")) {
		t.Fatal("fsm may not import cluster")
	}
	if forbiddenHit("fsm", "google.golang.org/grpc/codes") == "" || forbiddenHit("fsm", "github.com/hashicorp/raft") == "" {
		t.Fatal("forbidden dependencies of fsm not detected")
	}
	if !contains(forbiddenDirect["fsm"], "math/rand") {
		t.Fatal("randomness in fsm not detected")
	}
	if contains(allowed["authz"], topFolder(module+"/cluster")) || forbiddenHit("authz", "google.golang.org/grpc/peer") == "" {
		t.Fatal("authz may not reach cluster or gRPC")
	}
	if allowedDep(allowed["jepsen"], module+"/cluster") || allowedDep(allowed["jepsen"], module+"/internal/testcluster") ||
		!allowedDep(allowed["jepsen"], module+"/internal/netns") || allowedDep(allowed["jepsen"], module+"/internal/netnsx") {
		t.Fatal("jepsen may reach internal/dumplog and internal/netns, not cluster or the rest of internal")
	}
	if contains(harnessAllowed["history"], "checker") || contains(harnessAllowed["checker"], "report") || contains(harnessAllowed["checker"], "") {
		t.Fatal("jepsen/history may not import checker, nor checker report or the top-level harness")
	}
	if sub, ok := harnessSub(harnessModule + "/checker/checkertest"); !ok || sub != "checker" {
		t.Fatal("a subfolder of jepsen/checker is held to checker's row")
	}
	if _, ok := harnessSub(module + "/jepsenx"); ok {
		t.Fatal("harness prefix match must respect path boundaries")
	}
	if forbiddenHit("fsm", "github.com/hashicorp/raftx") != "" {
		t.Fatal("prefix match must respect path boundaries")
	}
}

// harnessSub returns the folder under jepsen/ of a package of the
// harness's module ("" for the top-level package), and false for a package
// outside it.
func harnessSub(importPath string) (string, bool) {
	if importPath == harnessModule {
		return "", true
	}
	rest, ok := strings.CutPrefix(importPath, harnessModule+"/")
	if !ok {
		return "", false
	}
	sub, _, _ := strings.Cut(rest, "/")
	return sub, true
}

func forbiddenHit(top, dep string) string {
	for _, f := range forbidden[top] {
		if dep == f || strings.HasPrefix(dep, f+"/") {
			return f
		}
	}
	return ""
}

func topFolder(importPath string) string {
	rest := strings.TrimPrefix(importPath, module+"/")
	top, _, _ := strings.Cut(rest, "/")
	return top
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// TestFSMReadsNoClockAndStartsNoGoroutine scans the fsm sources: time
// arrives only as a stamped field, and apply runs on the caller's goroutine.
func TestFSMReadsNoClockAndStartsNoGoroutine(t *testing.T) {
	files, err := filepath.Glob("../../fsm/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fsm sources found: %v", err)
	}
	bad := regexp.MustCompile(`time\.(Now|Since|Until|Sleep|After|Tick|NewTimer|NewTicker)\b|^\s*go\s`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if bad.MatchString(line) {
				t.Errorf("%s:%d: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
	if !bad.MatchString("\tnow := time.Now()") || !bad.MatchString("\tgo f()") {
		t.Fatal("the scan would miss a clock read or a goroutine")
	}
}
