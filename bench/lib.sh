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
# $LEASED when set, else the one bench_workdir built. With METRICS_PORT set,
# node i also serves /metrics on 127.0.0.1:METRICS_PORT+i-1.
start_leased() {
  local port=$1 data=$2 log=$3 peers="" i metrics
  shift 3
  lf_endpoints=""
  for i in 1 2 3; do
    peers+="${peers:+,}n$i=127.0.0.1:$((port + i - 1))"
    lf_endpoints+="${lf_endpoints:+,}127.0.0.1:$((port + i - 1))"
  done
  for i in 1 2 3; do
    metrics=()
    if [ -n "${METRICS_PORT:-}" ]; then metrics=(--metrics-listen "127.0.0.1:$((METRICS_PORT + i - 1))"); fi
    "${LEASED:-$WORK/bin/leased}" --insecure "$@" "${metrics[@]}" --id "n$i" --listen "127.0.0.1:$((port + i - 1))" \
      --data-dir "$data/n$i" --bootstrap "$peers" >"$log-n$i.log" 2>&1 &
    pids+=($!)
  done
}

# stage_means NAME: the leader's propose_stage_seconds of the cluster
# start_leased started with METRICS_PORT, as one line: NAME, then each
# stage's mean in microseconds and the entries counted (the node with the
# most is the leader), then how the commit stage splits: the leader's log
# write and its replication round trip (both followers) as means.
stage_means() {
  local i best="" bestn=0 out n
  for i in 1 2 3; do
    out=$(curl -fsS "http://127.0.0.1:$((METRICS_PORT + i - 1))/metrics" 2>/dev/null | grep '^leasefence_\(propose_stage\|log_write\|replication\)_seconds_\(sum\|count\)' || true)
    n=$(echo "$out" | awk '/_count\{stage="commit"\}/ {print int($2)}')
    if [ "${n:-0}" -gt "$bestn" ]; then bestn=$n best=$out; fi
  done
  echo "$best" | awk -v name="$1" '
    /^leasefence_propose_stage/ { match($1, /stage="[a-z]+"/); st = substr($1, RSTART + 7, RLENGTH - 8)
      if ($1 ~ /_sum/) sum[st] = $2; else cnt[st] = $2 }
    /^leasefence_log_write_seconds_sum/ { lw += $2 } /^leasefence_log_write_seconds_count/ { lwn += $2 }
    /^leasefence_replication_seconds_sum/ { rp += $2 } /^leasefence_replication_seconds_count/ { rpn += $2 }
    END { printf "%s", name
      split("queue commit apply answer", order, " ")
      for (i = 1; i <= 4; i++) { s = order[i]; printf "  %s %.0f us", s, (cnt[s] > 0 ? 1e6 * sum[s] / cnt[s] : 0) }
      printf "  (%d entries)", cnt["commit"]
      printf "  log write %.0f us, replication %.0f us\n", (lwn > 0 ? 1e6 * lw / lwn : 0), (rpn > 0 ? 1e6 * rp / rpn : 0) }'
}
