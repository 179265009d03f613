#!/usr/bin/env bash
# leased-compare.sh: two builds of leased side by side, in one run on this
# machine — for "no regression beyond noise" after a change. For each round
# and each build, in alternating order, it starts a fresh three-node cluster
# of that build on loopback (default settings, one process per node), runs
# leasebench's acquire-release cycle at each client count, and stops it.
# The report gives each build's median and the median ratio new/old with
# its range over the rounds.
#
#   bench/leased-compare.sh OLD_LEASED NEW_LEASED      # ROUNDS=3 DURATION=10s
#   CLIENTS=1,64 WORKLOADS=acquire-release,renew-unary ROUNDS=5 bench/leased-compare.sh a b
#
# Build the old one from a commit with, e.g.:
#   git worktree add /tmp/old <commit> && (cd /tmp/old && go build -o /tmp/old-bin/ ./cmd/leased)
# Ports 127.0.0.1:27101-27103 (LF_PORT). A tool for people, not part of
# `make test`; run it with nothing else running.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 OLD_LEASED NEW_LEASED" >&2; exit 2; }
OLD=$1 NEW=$2
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-1,64}
WORKLOADS=${WORKLOADS:-acquire-release}
LF_PORT=${LF_PORT:-27101}
GO=${GO:-go}

WORK=$(mktemp -d -t leasefence-leased-compare.XXXXXX)
pids=()
stop_cluster() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
cleanup() {
  trap - INT TERM EXIT
  stop_cluster
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup INT TERM EXIT

mkdir -p "$WORK/bin"
$GO build -o "$WORK/bin/" ./cmd/leasebench
(cd bench/etcd && $GO build -o "$WORK/bin/etcdbench" .)

peers="" endpoints=""
for i in 1 2 3; do
  peers+="${peers:+,}n$i=127.0.0.1:$((LF_PORT + i - 1))"
  endpoints+="${endpoints:+,}127.0.0.1:$((LF_PORT + i - 1))"
done
run_one() { # NAME BINARY ROUND
  local dir="$WORK/$1-$3"
  for i in 1 2 3; do
    "$2" --insecure --id "n$i" --listen "127.0.0.1:$((LF_PORT + i - 1))" \
      --data-dir "$dir/n$i" --bootstrap "$peers" >"$dir-n$i.log" 2>&1 &
    pids+=($!)
  done
  "$WORK/bin/leasebench" --endpoints "$endpoints" --system "$1" --workload "$WORKLOADS" --concurrency "$CLIENTS" \
    --duration "$DURATION" --warmup "$WARMUP" --json >>"$WORK/results.jsonl" 2>>"$WORK/bench.log"
  stop_cluster
}
echo "old: $OLD ($("$OLD" --version 2>/dev/null | head -1)); new: $NEW ($("$NEW" --version 2>/dev/null | head -1))"
echo "machine: $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS rounds of $WORKLOADS at $CLIENTS clients, $DURATION after $WARMUP"
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then order=(old new); else order=(new old); fi
  echo "round $round (${order[0]} first)"
  for b in "${order[@]}"; do
    if [ "$b" = old ]; then run_one old "$OLD" "$round"; else run_one new "$NEW" "$round"; fi
  done
done
echo
"$WORK/bin/etcdbench" report -a new -b old "$WORK/results.jsonl"
