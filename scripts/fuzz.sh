#!/usr/bin/env bash
# Runs every Go fuzz target of the module for the given time each
# (default 3s): scripts/fuzz.sh 5m. Seeds (f.Add) also run as plain tests
# in `go test`; this explores beyond them. A failing input is written under
# the package's testdata/fuzz/ by go test: commit it as a regression seed.
set -euo pipefail
cd "$(dirname "$0")/.."
time=${1:-3s}
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
    echo "fuzz $pkg $target for $time"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$time" "$pkg" >/tmp/fuzz-out.$$ 2>&1 || { cat /tmp/fuzz-out.$$; rm -f /tmp/fuzz-out.$$; exit 1; }
    tail -1 /tmp/fuzz-out.$$
  done
done
rm -f /tmp/fuzz-out.$$
