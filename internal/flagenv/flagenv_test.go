package flagenv

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestEnvironmentSetsFlagsAndCommandLineWins(t *testing.T) {
	t.Setenv("TEST_DATA_DIR", "/from/env")
	t.Setenv("TEST_TTL", "7s")
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	dir := fs.String("data-dir", "", "")
	ttl := fs.Duration("ttl", time.Second, "")
	if err := Apply(fs, "TEST_"); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--ttl", "3s"}); err != nil {
		t.Fatal(err)
	}
	if *dir != "/from/env" || *ttl != 3*time.Second {
		t.Fatalf("dir %q ttl %v", *dir, *ttl)
	}
}

func TestBadEnvironmentValueNamesTheVariable(t *testing.T) {
	t.Setenv("TEST_TTL", "soon")
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Duration("ttl", time.Second, "")
	if err := Apply(fs, "TEST_"); err == nil || !strings.Contains(err.Error(), "TEST_TTL") {
		t.Fatalf("got %v", err)
	}
}
