//go:build !plantedbugs

package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/leasefence/leasefence/internal/planted"
)

// A release build refuses LEASEFENCE_PLANTED_BUGS at start, with exit 2
// and an error that says why, before it opens anything.
func TestReleaseBuildRefusesPlantedBugs(t *testing.T) {
	t.Setenv(planted.Env, "local-reads")
	var errb bytes.Buffer
	args := []string{"--id", "n1", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--bootstrap", "n1=127.0.0.1:7001", "--insecure", "--memory-limit", "off"}
	if code := run(args, io.Discard, &errb); code != 2 || !strings.Contains(errb.String(), "built without planted bugs") {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}
