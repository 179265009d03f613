# lib.sh: what the bench/*-compare.sh scripts share. Sourced (from the
# repository root, with set -euo pipefail), never run.

# bench_workdir NAME: a fresh work dir in WORK (leasefence-NAME.XXXXXX),
# removed on exit unless KEEP=1; every process whose pid is added to pids
# is stopped (SIGTERM, then waited for) on exit. Then leased and leasebench
# are built into $WORK/bin.
bench_workdir() {
  WORK=$(mktemp -d -t "leasefence-$1.XXXXXX")
  pids=()
  trap bench_cleanup INT TERM EXIT
  echo "building into $WORK/bin"
  mkdir -p "$WORK/bin"
  $GO build -o "$WORK/bin/" ./cmd/leased ./cmd/leasebench
}

bench_cleanup() {
  trap - INT TERM EXIT
  stop_all
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}

# stop_all stops every process in pids (SIGTERM, then waited for) and
# empties it.
stop_all() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}

# start_leased PORT DATA LOG [LEASED_FLAG...]: a three-node leasefence
# cluster with default settings, one leased per node, bootstrapped
# together: node i (n1..n3) listens on 127.0.0.1:PORT+i-1, keeps its data
# in DATA/ni and logs to LOG-ni.log; the flags go to every node. Sets
# lf_endpoints to the nodes' addresses, comma-separated. The binary is
# $LEASED when set, else the one bench_workdir built.
start_leased() {
  local port=$1 data=$2 log=$3 peers="" i
  shift 3
  lf_endpoints=""
  for i in 1 2 3; do
    peers+="${peers:+,}n$i=127.0.0.1:$((port + i - 1))"
    lf_endpoints+="${lf_endpoints:+,}127.0.0.1:$((port + i - 1))"
  done
  for i in 1 2 3; do
    "${LEASED:-$WORK/bin/leased}" --insecure "$@" --id "n$i" --listen "127.0.0.1:$((port + i - 1))" \
      --data-dir "$data/n$i" --bootstrap "$peers" >"$log-n$i.log" 2>&1 &
    pids+=($!)
  done
}
