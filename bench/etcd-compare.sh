#!/usr/bin/env bash
# etcd-compare.sh: leasefence against etcd, side by side, in one run on this
# machine. Starts a three-node etcd and a three-node leasefence (three
# `leased` processes) on loopback with default settings, data in one
# temporary directory, and drives the equivalent operations on each
# (leasebench for leasefence, etcdbench for etcd; one measurement loop):
#
#   row             leasefence                      etcd
#   cycle-1         Acquire + Release, 1 client     LeaseGrant + Txn(put if absent,
#   cycle-64        the same, 64 clients              with the lease) + LeaseRevoke;
#                   (to the leader)                   the Txn's revision is the token
#   spread-64       the same, 3 connections, one per node (followers forward)
#   contended-64    64 clients on 4 shared resources: hand-overs/s, refusals apart
#   renew-64        unary Renew of one's own lease  KeepAliveOnce
#
# ROUNDS rounds (default 3); within each round every row runs both systems
# back to back, and which goes first alternates from row to row and from
# round to round, so neither always meets a warmer or a cooler machine.
# The report gives each system's median ops/s and the median leasefence/etcd
# ratio with its range over the rounds. LONG=1 then adds the rows etcd has
# no counterpart for: renewals through keep-alive streams over 100 000 live
# leases (100 000/s asked) and the overload benchmark (bench/overload, 2x
# the sustainable renewal rate). A tool for people, not part of `make test`;
# run it with nothing else running.
#
#   bench/etcd-compare.sh                     # ROUNDS=3 DURATION=10s WARMUP=2s
#   ROWS=cycle-1,renew-64 bench/etcd-compare.sh
#   KEEP=1 bench/etcd-compare.sh              # keep the work dir (logs, results)
#   LONG=1 bench/etcd-compare.sh
#
# etcd comes from Debian's etcd-server package, installed when missing
# (needs root). Ports: etcd 127.0.0.1:23791-23793 (peers 23801-23803),
# leasefence 127.0.0.1:27001-27003; override with ETCD_PORT, ETCD_PEER_PORT,
# LF_PORT.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
ROUNDS=${ROUNDS:-3}
ROWS=${ROWS:-cycle-1,cycle-64,spread-64,contended-64,renew-64}
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

bench_workdir etcd-compare
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
start_leased "$LF_PORT" "$WORK/leasefence" "$WORK/leased"

echo "etcd $(etcd --version | head -1 | awk '{print $3}') at $etcd_endpoints; leasefence at $lf_endpoints"
echo "machine: $(nproc) cpus, $(uname -sr), $($GO version | awk '{print $3}'); ${DURATION} per run after ${WARMUP} warm-up"

common=(--duration "$DURATION" --warmup "$WARMUP" --json)
# row_args ROW SYSTEM: the benchmark's flags for one row.
row_args() {
  local lead=(--leader-only)
  [ "$2" = leasefence ] && lead=() # leasebench sends to the leader first by itself
  case "$1" in
    cycle-1) echo "${lead[*]} --workload acquire-release --concurrency 1" ;;
    cycle-64) echo "${lead[*]} --workload acquire-release --concurrency 64" ;;
    spread-64) echo "--spread --conns 3 --workload acquire-release --concurrency 64" ;;
    contended-64) echo "${lead[*]} --workload contended --resources 4 --concurrency 64" ;;
    renew-64) echo "${lead[*]} --workload renew-unary --ttl 60s --concurrency 64" ;;
    *) echo "unknown row $1 (rows: cycle-1 cycle-64 spread-64 contended-64 renew-64)" >&2; return 1 ;;
  esac
}
bench_one() { # SYSTEM ROW
  local args
  args=$(row_args "$2" "$1")
  if [ "$1" = etcd ]; then
    # shellcheck disable=SC2086
    "$WORK/bin/etcdbench" --endpoints "$etcd_endpoints" $args "${common[@]}" >>"$WORK/etcd.jsonl" 2>>"$WORK/bench.log"
  else
    # shellcheck disable=SC2086
    "$WORK/bin/leasebench" --endpoints "$lf_endpoints" $args "${common[@]}" >>"$WORK/leasefence.jsonl" 2>>"$WORK/bench.log"
  fi
}
i=0
for round in $(seq 1 "$ROUNDS"); do
  for row in ${ROWS//,/ }; do
    if [ $(((round + i) % 2)) -eq 0 ]; then order=(etcd leasefence); else order=(leasefence etcd); fi
    i=$((i + 1))
    echo "round $round: $row (${order[0]} first)"
    for sys in "${order[@]}"; do bench_one "$sys" "$row"; done
  done
done

echo
"$WORK/bin/etcdbench" report "$WORK/leasefence.jsonl" "$WORK/etcd.jsonl"

if [ "${LONG:-0}" = 1 ]; then
  echo
  echo "renewals through keep-alive streams, 100 000 live leases, 100 000/s asked (leasefence only):"
  "$WORK/bin/leasebench" --endpoints "$lf_endpoints" --workload renew --concurrency 4 --leases 100000 \
    --ttl 60s --keepalive-interval 1s --duration "$DURATION" --warmup "$WARMUP" 2>>"$WORK/bench.log"
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
  echo
  echo "overload (bench/overload; its own three leased processes):"
  $GO test ./bench/overload -run '^$' -bench Overload -benchtime 1x -overload.bins "main=$WORK/bin/leased"
fi
