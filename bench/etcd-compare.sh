#!/usr/bin/env bash
# etcd-compare.sh: leasefence against etcd, side by side, in one run on this
# machine. Starts a three-node etcd and a three-node leasefence (three
# `leased` processes) on loopback with default settings, data in one
# temporary directory, and drives the equivalent cycle on each:
#
#   leasefence  Acquire + Release                       (leasebench)
#   etcd        LeaseGrant + Txn(put if absent, with the lease) + LeaseRevoke
#               (the Txn header's revision is the fencing token; etcdbench)
#
# at 1 and 64 concurrent clients (CLIENTS), both talking to their leader,
# alternating the systems at each client count. It prints both tables and
# the ratios leasefence/etcd. A tool for people, not part of `make test`.
#
#   bench/etcd-compare.sh                 # DURATION=10s WARMUP=2s CLIENTS=1,64
#   DURATION=30s ROUNDS=3 bench/etcd-compare.sh
#   KEEP=1 bench/etcd-compare.sh          # keep the work dir (logs, results)
#
# etcd comes from Debian's etcd-server package, installed when missing
# (needs root). Ports: etcd 127.0.0.1:23791-23793 (peers 23801-23803),
# leasefence 127.0.0.1:27001-27003; override with ETCD_PORT, ETCD_PEER_PORT,
# LF_PORT.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
CLIENTS=${CLIENTS:-1,64}
ROUNDS=${ROUNDS:-1}
ETCD_PORT=${ETCD_PORT:-23791}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-23801}
LF_PORT=${LF_PORT:-27001}
GO=${GO:-go}

if ! command -v etcd >/dev/null; then
  echo "etcd not found; installing Debian's etcd-server"
  apt-cache policy etcd-server
  if [ "$(id -u)" -ne 0 ]; then
    echo "run as root, or: sudo apt-get install -y etcd-server" >&2
    exit 2
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y etcd-server
  # The package may start a system etcd on 2379; ours uses other ports.
fi

WORK=$(mktemp -d -t leasefence-etcd-compare.XXXXXX)
pids=()
cleanup() {
  trap - INT TERM EXIT
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup INT TERM EXIT

echo "building into $WORK/bin"
mkdir -p "$WORK/bin"
$GO build -o "$WORK/bin/" ./cmd/leased ./cmd/leasebench
(cd bench/etcd && $GO build -o "$WORK/bin/etcdbench" .)

# A three-node etcd, default settings (heartbeat 100ms, election 1s, fsync).
initial="" etcd_endpoints=""
for i in 1 2 3; do
  initial+="${initial:+,}e$i=http://127.0.0.1:$((ETCD_PEER_PORT + i - 1))"
  etcd_endpoints+="${etcd_endpoints:+,}127.0.0.1:$((ETCD_PORT + i - 1))"
done
for i in 1 2 3; do
  cport=$((ETCD_PORT + i - 1)) pport=$((ETCD_PEER_PORT + i - 1))
  etcd --name "e$i" --data-dir "$WORK/etcd/e$i" \
    --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
    --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "$initial" --initial-cluster-state new --initial-cluster-token leasefence-bench \
    --logger zap --log-outputs "$WORK/etcd-e$i.log" >/dev/null 2>&1 &
  pids+=($!)
done

# A three-node leasefence, default settings, one process per node.
peers="" lf_endpoints=""
for i in 1 2 3; do
  peers+="${peers:+,}n$i=127.0.0.1:$((LF_PORT + i - 1))"
  lf_endpoints+="${lf_endpoints:+,}127.0.0.1:$((LF_PORT + i - 1))"
done
for i in 1 2 3; do
  "$WORK/bin/leased" --insecure --id "n$i" --listen "127.0.0.1:$((LF_PORT + i - 1))" \
    --data-dir "$WORK/leasefence/n$i" --bootstrap "$peers" >"$WORK/leased-n$i.log" 2>&1 &
  pids+=($!)
done

echo "etcd $(etcd --version | head -1 | awk '{print $3}') at $etcd_endpoints; leasefence at $lf_endpoints"
echo "machine: $(nproc) cpus, $(uname -sr), $($GO version | awk '{print $3}'); ${DURATION} per run after ${WARMUP} warm-up"

common=(--duration "$DURATION" --warmup "$WARMUP" --json)
for round in $(seq 1 "$ROUNDS"); do
  for c in ${CLIENTS//,/ }; do
    echo "round $round: $c clients"
    "$WORK/bin/etcdbench" --endpoints "$etcd_endpoints" --leader-only --concurrency "$c" \
      "${common[@]}" >>"$WORK/etcd.jsonl" 2>>"$WORK/bench.log"
    "$WORK/bin/leasebench" --endpoints "$lf_endpoints" --workload acquire-release --concurrency "$c" \
      "${common[@]}" >>"$WORK/leasefence.jsonl" 2>>"$WORK/bench.log"
  done
done

echo
"$WORK/bin/etcdbench" report "$WORK/leasefence.jsonl" "$WORK/etcd.jsonl"
