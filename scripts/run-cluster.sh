#!/usr/bin/env bash
# Starts a three-node leasefence cluster on loopback, each node its own
# leased process with its data under run-data/, and stops all three on
# Ctrl-C. Data is kept between runs: tokens continue where they stopped.
# Remove run-data/ (make clean) to start a fresh cluster.
#
#   scripts/run-cluster.sh              start the cluster (make run)
#   scripts/run-cluster.sh restart n2   start node n2 again after it was
#                                       killed, while the cluster runs
#
# Each node appends to run-data/nN.log (a dated line marks every start) and
# writes its pid to run-data/nN.pid. If a node fails to start, the script
# prints the last lines of its log, stops the others and exits 1; it never
# says the cluster is up unless all three nodes answer and one leads.
#
# Variables: BIN (default bin), DATA (run-data), PORT_BASE (7001),
# METRICS_BASE (9101: node nI serves /metrics and its status page on
# METRICS_BASE+I-1), START_TIMEOUT in seconds (20).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin}
DATA=${DATA:-run-data}
PORT_BASE=${PORT_BASE:-7001}
METRICS_BASE=${METRICS_BASE:-9101}
START_TIMEOUT=${START_TIMEOUT:-20}
peers=""
for i in 1 2 3; do
  peers+="${peers:+,}n$i=127.0.0.1:$((PORT_BASE + i - 1))"
done
endpoints="127.0.0.1:$PORT_BASE,127.0.0.1:$((PORT_BASE + 1)),127.0.0.1:$((PORT_BASE + 2))"

addr() { echo "127.0.0.1:$((PORT_BASE + $1 - 1))"; }

# start_node I starts node nI in the background, appending to its log.
start_node() {
  local i=$1 log="$DATA/n$1.log"
  echo "=== $(date -u +%Y-%m-%dT%H:%M:%SZ) run-cluster.sh starts n$i ===" >>"$log"
  # --insecure: plaintext on loopback, for local development only.
  "$BIN/leased" --insecure --id "n$i" --listen "$(addr "$i")" --data-dir "$DATA/n$i" \
    --bootstrap "$peers" --metrics-listen "127.0.0.1:$((METRICS_BASE + i - 1))" >>"$log" 2>&1 &
  echo $! >"$DATA/n$i.pid"
}

alive() { kill -0 "$1" 2>/dev/null; }

# why I prints why node nI is not running: its exit and its log's last lines.
why() {
  echo "n$1 failed to start; the last lines of $DATA/n$1.log:" >&2
  tail -n 8 "$DATA/n$1.log" | sed 's/^/    /' >&2
}

# wait_up PID... waits until every node answers and one leads; it returns 1
# (after saying why) as soon as a node's process has exited, or at the
# timeout.
wait_up() {
  local deadline=$((SECONDS + START_TIMEOUT)) i
  while :; do
    for i in 1 2 3; do
      if [ -n "${pids[$i]:-}" ] && ! alive "${pids[$i]}"; then
        why "$i"
        return 1
      fi
    done
    if "$BIN/leasectl" --endpoints "$endpoints" status 2>/dev/null | grep -q '^leader .*(127'; then
      local all=1
      for i in 1 2 3; do
        "$BIN/leasectl" --endpoints "$(addr "$i")" status >/dev/null 2>&1 || all=0
      done
      [ "$all" = 1 ] && return 0
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "the cluster did not come up within ${START_TIMEOUT}s; the last lines of each log:" >&2
      for i in 1 2 3; do
        echo "  $DATA/n$i.log:" >&2
        tail -n 4 "$DATA/n$i.log" | sed 's/^/    /' >&2
      done
      return 1
    fi
    sleep 0.2
  done
}

mkdir -p "$DATA"

if [ "${1:-}" = restart ]; then
  n=${2:-}
  case "$n" in
    n1 | n2 | n3) i=${n#n} ;;
    *) echo "usage: scripts/run-cluster.sh restart n1|n2|n3" >&2; exit 2 ;;
  esac
  if [ -f "$DATA/$n.pid" ] && alive "$(cat "$DATA/$n.pid")"; then
    echo "$n is running (pid $(cat "$DATA/$n.pid")); kill it first" >&2
    exit 1
  fi
  start_node "$i"
  pid=$(cat "$DATA/$n.pid")
  for _ in $(seq 1 $((START_TIMEOUT * 5))); do
    if ! alive "$pid"; then why "$i"; exit 1; fi
    if "$BIN/leasectl" --endpoints "$(addr "$i")" status >/dev/null 2>&1; then
      echo "restarted $n (pid $pid) on $(addr "$i"), log in $DATA/$n.log; the make run terminal's Ctrl-C stops it too"
      exit 0
    fi
    sleep 0.2
  done
  echo "$n (pid $pid) does not answer after ${START_TIMEOUT}s; see $DATA/$n.log" >&2
  exit 1
fi

pids=()
stop() {
  trap - INT TERM EXIT
  echo
  echo "stopping the cluster..."
  # The pid files name restarted nodes too; jobs -p the idle sleep.
  for i in 1 2 3; do
    if [ -f "$DATA/n$i.pid" ]; then kill -TERM "$(cat "$DATA/n$i.pid")" 2>/dev/null || true; fi
  done
  kill -TERM $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
  for i in 1 2 3; do
    if [ -f "$DATA/n$i.pid" ]; then
      p=$(cat "$DATA/n$i.pid")
      for _ in $(seq 1 100); do alive "$p" || break; sleep 0.1; done
      rm -f "$DATA/n$i.pid"
    fi
  done
  echo "stopped; data kept in $DATA/"
}
trap stop EXIT
trap 'stop; exit 130' INT TERM

for i in 1 2 3; do
  start_node "$i"
  pids[$i]=$(cat "$DATA/n$i.pid")
  echo "started n$i (pid ${pids[$i]}) on $(addr "$i"), log in $DATA/n$i.log"
done

if ! wait_up; then
  echo "the cluster is NOT up; stopping the nodes that started" >&2
  exit 1
fi
cat <<MSG

cluster is up. In another terminal:

  export LEASEFENCE_ENDPOINTS=$endpoints
  $BIN/leasectl status
  $BIN/leasectl acquire jobs/42 --ttl 30s --holder me

Status pages (members, leases, events): http://127.0.0.1:$METRICS_BASE/ (n1),
http://127.0.0.1:$((METRICS_BASE + 1))/ (n2), http://127.0.0.1:$((METRICS_BASE + 2))/ (n3).
grpcurl works without .proto files: grpcurl -plaintext 127.0.0.1:$PORT_BASE list

Kill any one node and keep acquiring; start it again with its command:

  kill -9 \$(cat $DATA/n2.pid)
  scripts/run-cluster.sh restart n2

Ctrl-C stops all three.
MSG
# Keep running until Ctrl-C, also after a node was killed (it may be
# restarted from another terminal).
while :; do sleep 3600 & wait $! || true; done
