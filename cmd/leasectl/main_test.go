package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMain doubles as the leasectl binary: with LEASECTL_RUN_MAIN=1 the test
// binary runs main with its arguments instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv("LEASECTL_RUN_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func TestMainExitsWithTheCommandStatus(t *testing.T) {
	cases := []struct {
		args   []string
		status int
		stdout string
	}{
		{[]string{"help"}, 0, "usage: leasectl"},
		{[]string{"renew", "not-a-lease-id"}, 2, ""},
		{[]string{"no-such-command"}, 2, ""},
	}
	for _, c := range cases {
		cmd := exec.Command(os.Args[0], c.args...)
		cmd.Env = append(os.Environ(), "LEASECTL_RUN_MAIN=1")
		out, err := cmd.Output()
		status := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			status = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if status != c.status || !strings.Contains(string(out), c.stdout) {
			t.Errorf("leasectl %q: status %d, stdout %q; want %d and %q", c.args, status, out, c.status, c.stdout)
		}
	}
}
