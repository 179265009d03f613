package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestFlagsEnvironmentAndValidation(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LEASEFENCE_ID", "n1")
	t.Setenv("LEASEFENCE_DATA_DIR", dir)
	t.Setenv("LEASEFENCE_SKEW_MARGIN", "200ms")
	cfg, err := parse([]string{"--skew-margin", "300ms", "--bootstrap", "n1=127.0.0.1:7001"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ID != "n1" || cfg.DataDir != dir || cfg.SkewMargin != 300*time.Millisecond || cfg.Bootstrap["n1"] != "127.0.0.1:7001" {
		t.Fatalf("config %+v", cfg)
	}
	cases := map[string][]string{
		"first start needs bootstrap or join": {},
		"bad peer list":                       {"--bootstrap", "n1"},
		"ttl under twice the margin":          {"--bootstrap", "n1=127.0.0.1:7001", "--min-ttl", "300ms"},
		"bootstrap without this node":         {"--bootstrap", "n2=127.0.0.1:7002"},
		"unknown log level":                   {"--bootstrap", "n1=127.0.0.1:7001", "--log-level", "loud"},
		"stray argument":                      {"--bootstrap", "n1=127.0.0.1:7001", "extra"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := parse(args, io.Discard); err == nil {
				t.Fatalf("%v accepted", args)
			}
		})
	}
	t.Setenv("LEASEFENCE_TICK", "often")
	if _, err := parse(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "LEASEFENCE_TICK") {
		t.Fatalf("bad environment value: %v", err)
	}
}
