#!/usr/bin/env bash
# Runs `go test ARGS...` ($GO, default go), its output passed through, and
# when it fails prints again, last, what failed: the FAIL lines and, after
# a timeout, the tests that were running. A CI log keeps only its tail, and
# a timeout's goroutine dump (thousands of lines) pushes the test's name
# out of it.
set -uo pipefail
log=$(mktemp /tmp/gotest.XXXXXX)
trap 'rm -f "$log"' EXIT
"${GO:-go}" test "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  echo "=== go test $*: what failed (repeated from above) ==="
  grep -E -A 20 '^panic: test timed out' "$log" | grep -E '^(panic: test timed out|running tests:|[[:space:]]+Test)' || true
  grep -E '^(--- FAIL|FAIL|panic: )' "$log" | head -40 || true
fi
exit "$rc"
