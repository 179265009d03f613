package jepsen

import (
	"testing"
	"time"

	"github.com/leasefence/leasefence/jepsen/checker"
)

const (
	ms  = int64(time.Millisecond)
	sec = int64(time.Second)
)

func expect(t *testing.T, r checker.Result, verdict, anomaly string) {
	t.Helper()
	if r.Verdict != verdict || r.Anomaly != anomaly {
		t.Fatalf("%s: got %s %q (%s), want %s %q", r.Checker, r.Verdict, r.Anomaly, r.Witness, verdict, anomaly)
	}
	if verdict != checker.Valid && r.Witness == "" {
		t.Fatalf("%s: %s without a witness", r.Checker, verdict)
	}
}
