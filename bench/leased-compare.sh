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
#   METRICS_PORT=27201 CLIENTS=1 bench/leased-compare.sh a b   # and the leader's propose stages
#   LEASEBENCH_ARGS="--spread --conns 3" CLIENTS=64 bench/leased-compare.sh a b   # through followers
#   OLD_LEASEBENCH=/tmp/old-bin/leasebench bench/leased-compare.sh a b   # each build with its own client
#
# To compare flags of one build, give wrapper scripts, e.g. a file holding
#   exec /path/leased --log-store boltdb "$@"
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

. bench/lib.sh
bench_workdir leased-compare
(cd bench/etcd && $GO build -o "$WORK/bin/etcdbench" .)

run_one() { # NAME BINARY ROUND LEASEBENCH
  LEASED=$2 start_leased "$LF_PORT" "$WORK/$1-$3" "$WORK/$1-$3"
  # shellcheck disable=SC2086 # LEASEBENCH_ARGS is a list of flags
  "$4" --endpoints "$lf_endpoints" --system "$1" --workload "$WORKLOADS" --concurrency "$CLIENTS" ${LEASEBENCH_ARGS:-} \
    --duration "$DURATION" --warmup "$WARMUP" --json >>"$WORK/results.jsonl" 2>>"$WORK/bench.log"
  if [ -n "${METRICS_PORT:-}" ]; then stage_means "$1 round $3" >>"$WORK/stages.txt"; fi
  stop_all
}
echo "old: $OLD ($("$OLD" --version 2>/dev/null | head -1)); new: $NEW ($("$NEW" --version 2>/dev/null | head -1))"
echo "machine: $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS rounds of $WORKLOADS at $CLIENTS clients, $DURATION after $WARMUP"
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then order=(old new); else order=(new old); fi
  echo "round $round (${order[0]} first)"
  for b in "${order[@]}"; do
    if [ "$b" = old ]; then run_one old "$OLD" "$round" "${OLD_LEASEBENCH:-$WORK/bin/leasebench}"
    else run_one new "$NEW" "$round" "${NEW_LEASEBENCH:-$WORK/bin/leasebench}"; fi
  done
done
echo
"$WORK/bin/etcdbench" report -a new -b old "$WORK/results.jsonl"
if [ -n "${METRICS_PORT:-}" ]; then
  echo
  echo "the leader's propose stages (mean over every client count of the run; cluster/metrics.go):"
  sort "$WORK/stages.txt"
fi
