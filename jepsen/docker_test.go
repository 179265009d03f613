package jepsen

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/leasefence/leasefence/internal/netns"
	"github.com/leasefence/leasefence/jepsen/history"
	nm "github.com/leasefence/leasefence/jepsen/nemesis"
)

func TestDockerNamesCarryThePidAndNodeID(t *testing.T) {
	d := dockerNames{pid: 4242}
	if got := d.network(); got != "lfjd-4242" {
		t.Errorf("network %q", got)
	}
	if got := d.container("n2"); got != "lfjd-4242-n2" {
		t.Errorf("container %q", got)
	}
	if got := d.volume("n2"); got != "lfjd-4242-n2" {
		t.Errorf("volume %q", got)
	}
}

func TestDockerStaleOnlyNamesOfDeadHarnesses(t *testing.T) {
	alive := func(pid int) bool { return pid == 100 }
	for _, c := range []struct {
		name  string
		stale bool
	}{
		{"lfjd-7", true},              // a dead harness's network
		{"lfjd-7-n1", true},           // its container or volume
		{"lfjd-100", false},           // a running harness's
		{"lfjd-100-n3", false},        // its container
		{"lfjd-", false},              // no pid
		{"lfjd-0", false},             // no such harness
		{"lfjd-7x", false},            // not a name docker mode makes
		{"xlfjd-7", false},            // prefix elsewhere
		{"lfj-7-n1", false},           // namespace mode's names are not docker's
		{"leasefence_n1-data", false}, // the compose deployment's volume
		{"bridge", false},
	} {
		if got := dockerStale(c.name, alive); got != c.stale {
			t.Errorf("dockerStale(%q) = %v, want %v", c.name, got, c.stale)
		}
	}
}

func TestDockerCreateArgsRunTheImageAsDeployed(t *testing.T) {
	d := dockerNames{pid: 9}
	got := dockerCreateArgs(d, "n2", "10.214.3.12", "leasefence:dev", "n1=10.214.3.11:7001,n2=10.214.3.12:7001",
		[]string{"--tick", "250ms", "--note", "{id}"})
	// No --entrypoint, --user, --listen or --data-dir: the image's own, as
	// users deploy it.
	want := []string{"create", "--name", "lfjd-9-n2", "--hostname", "n2", "--label", "leasefence.jepsen=9",
		"--network", "lfjd-9", "--ip", "10.214.3.12", "-v", "lfjd-9-n2:/data", "leasefence:dev",
		"--insecure", "--id", "n2", "--advertise", "10.214.3.12:7001", "--bootstrap", "n1=10.214.3.11:7001,n2=10.214.3.12:7001",
		"--tick", "250ms", "--note", "n2"}
	if !slices.Equal(got, want) {
		t.Fatalf("docker %s\nwant   %s", strings.Join(got, " "), strings.Join(want, " "))
	}
}

func TestDockerModeKnowsOnlyRealNemeses(t *testing.T) {
	for _, k := range DockerNemeses {
		if !slices.Contains(nm.AllNemeses, k) {
			t.Errorf("DockerNemeses names %q, which is no nemesis", k)
		}
	}
	for _, k := range []string{history.NemNetSlow, history.NemClockBump, history.NemStorage, history.NemRestore} {
		if slices.Contains(DockerNemeses, k) {
			t.Errorf("docker mode claims %s, which it cannot realise", k)
		}
	}
}

// dockerUsable skips the test without a Docker engine (and root), except
// under CI=true, where that is a failure.
func dockerUsable(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "docker mode needs root"
	} else if err := exec.Command(dockerBin, "info").Run(); err != nil {
		why = "no Docker engine: " + err.Error()
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// TestCleanupStaleDockerRemovesADeadHarnessLeftovers makes the network and
// volume a killed harness leaves behind (a pid that has exited), and those
// of a running one (this test's pid), and checks that only the first go.
func TestCleanupStaleDockerRemovesADeadHarnessLeftovers(t *testing.T) {
	dockerUsable(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale, live := dockerNames{pid: dead.Process.Pid}, dockerNames{pid: os.Getpid()}
	if netns.Alive(stale.pid) {
		t.Skipf("pid %d was reused already", stale.pid)
	}
	for _, d := range []dockerNames{stale, live} {
		if _, err := dockerDo("volume", "create", d.volume("n1")); err != nil {
			t.Fatal(err)
		}
		if _, err := dockerDo("network", "create", "--internal", d.network()); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = dockerDo("volume", "rm", "-f", live.volume("n1"), stale.volume("n1"))
		_, _ = dockerDo("network", "rm", live.network())
		_, _ = dockerDo("network", "rm", stale.network())
	})
	if err := CleanupStaleDocker(); err != nil {
		t.Fatal(err)
	}
	vols, _ := dockerDo("volume", "ls", "-q")
	nets, _ := dockerDo("network", "ls", "--format", "{{.Name}}")
	has := func(list, name string) bool { return slices.Contains(strings.Fields(list), name) }
	if has(vols, stale.volume("n1")) || has(nets, stale.network()) {
		t.Errorf("a dead harness's leftovers survived: volumes %q, networks %q", vols, nets)
	}
	if !has(vols, live.volume("n1")) || !has(nets, live.network()) {
		t.Errorf("a running harness's objects were removed: volumes %q, networks %q", vols, nets)
	}
}

// recordingRuntime records what Cluster hands it (beside the real
// DockerNet, which make jepsen-docker runs).
type recordingRuntime struct{ calls []string }

func (r *recordingRuntime) kill9(id string) error { r.calls = append(r.calls, "kill9 "+id); return nil }
func (r *recordingRuntime) restart(id string) error {
	r.calls = append(r.calls, "restart "+id)
	return nil
}
func (r *recordingRuntime) pause(id string) (bool, error) {
	r.calls = append(r.calls, "pause "+id)
	return true, nil
}
func (r *recordingRuntime) resume(id string) error {
	r.calls = append(r.calls, "resume "+id)
	return nil
}
func (r *recordingRuntime) paused(string) bool { return false }

func TestClusterHandsProcessFaultsToItsRuntime(t *testing.T) {
	rt := &recordingRuntime{}
	// No Proc is running: without the runtime every call below would fail
	// ("n1 is not running", "n1 not running").
	c := &Cluster{ids: []string{"n1"}, byID: map[string]int{"n1": 0}, procs: []*Proc{{Name: "n1"}}, rt: rt}
	if err := c.Kill9("n1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart("n1"); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Pause("n1"); !ok || err != nil {
		t.Fatalf("pause: %v %v", ok, err)
	}
	if err := c.Resume("n1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"kill9 n1", "restart n1", "pause n1", "resume n1"}
	if !slices.Equal(rt.calls, want) {
		t.Fatalf("runtime saw %v, want %v", rt.calls, want)
	}
}
