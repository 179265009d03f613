#!/usr/bin/env bash
# logstore-compare.sh: the two log stores (leased --log-store boltdb|wal)
# side by side in one run. Starts two three-node leasefence clusters
# (three `leased` processes each, default settings, data in one temporary
# directory), one per store, and drives the acquire+release cycle through
# each leader at 1 and 64 clients (CLIENTS), alternating the stores at
# every client count and the order from round to round. Prints, per
# client count, the median and range of ops/s and of the p50 latency over
# the rounds, and the wal/boltdb ratio of the medians. A tool for people,
# not part of `make test`.
#
#   bench/logstore-compare.sh                 # DURATION=10s WARMUP=2s CLIENTS=1,64 ROUNDS=3
#   KEEP=1 bench/logstore-compare.sh          # keep the work dir (logs, results)
#
# Ports: 127.0.0.1:27401-27403 (boltdb) and 27411-27413 (wal); override
# with LF_PORT (the second cluster is LF_PORT+10).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
CLIENTS=${CLIENTS:-1,64}
ROUNDS=${ROUNDS:-3}
LF_PORT=${LF_PORT:-27401}
GO=${GO:-go}

bench_workdir logstore-compare

declare -A endpoints
base=$LF_PORT
for store in boltdb wal; do
  start_leased "$base" "$WORK/$store" "$WORK/leased-$store" --log-store "$store"
  endpoints[$store]=$lf_endpoints
  base=$((base + 10))
done

echo "machine: $(nproc) cpus, $(uname -sr), $($GO version | awk '{print $3}'); ${DURATION} per run after ${WARMUP} warm-up, ${ROUNDS} rounds"
common=(--workload acquire-release --duration "$DURATION" --warmup "$WARMUP" --json)
for round in $(seq 1 "$ROUNDS"); do
  order="boltdb wal"
  [ $((round % 2)) = 0 ] && order="wal boltdb"
  for c in ${CLIENTS//,/ }; do
    for store in $order; do
      echo "round $round: $c clients, $store"
      "$WORK/bin/leasebench" --endpoints "${endpoints[$store]}" --concurrency "$c" "${common[@]}" |
        sed "s/^{/{\"store\":\"$store\",/" >>"$WORK/results.jsonl" 2>>"$WORK/bench.log"
    done
  done
done

echo
python3 - "$WORK/results.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault((r["clients"], r["store"]), []).append(r)
print("| clients | store | ops/s median (range) | p50 ms median (range) | errors |")
print("|---|---|---|---|---|")
for c in sorted({k[0] for k in by}):
    med = {}
    for s in ("boltdb", "wal"):
        rs = by.get((c, s), [])
        if not rs:
            continue
        ops = [r["ops_per_s"] for r in rs]
        p50 = [r["latency_ms"]["p50"] for r in rs]
        med[s] = (statistics.median(ops), statistics.median(p50))
        print(f"| {c} | {s} | {med[s][0]:.0f} ({min(ops):.0f}-{max(ops):.0f}) | {med[s][1]:.2f} ({min(p50):.2f}-{max(p50):.2f}) | {sum(r['errors'] for r in rs)} |")
    if len(med) == 2:
        print(f"| {c} | wal/boltdb | {med['wal'][0]/med['boltdb'][0]:.2f}x | {med['wal'][1]/med['boltdb'][1]:.2f}x | |")
PY
