#!/usr/bin/env bash
# Starts a three-node leasefence cluster on loopback, each node its own
# leased process with its data under run-data/, and stops all three on
# Ctrl-C. Data is kept between runs: tokens continue where they stopped.
# Remove run-data/ (make clean) to start a fresh cluster.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin}
DATA=${DATA:-run-data}
PORT_BASE=${PORT_BASE:-7001}
peers=""
for i in 1 2 3; do
  peers+="${peers:+,}n$i=127.0.0.1:$((PORT_BASE + i - 1))"
done

pids=()
stop() {
  trap - INT TERM EXIT
  echo
  echo "stopping the cluster..."
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "stopped; data kept in $DATA/"
}
trap stop INT TERM EXIT

mkdir -p "$DATA"
for i in 1 2 3; do
  addr=127.0.0.1:$((PORT_BASE + i - 1))
  # --insecure: plaintext on loopback, for local development only.
  "$BIN/leased" --insecure --id "n$i" --listen "$addr" --data-dir "$DATA/n$i" \
    --bootstrap "$peers" >"$DATA/n$i.log" 2>&1 &
  pids+=($!)
  echo "started n$i (pid $!) on $addr, log in $DATA/n$i.log"
done

endpoints="127.0.0.1:$PORT_BASE,127.0.0.1:$((PORT_BASE + 1)),127.0.0.1:$((PORT_BASE + 2))"
for _ in $(seq 1 100); do
  if "$BIN/leasectl" --endpoints "$endpoints" status >/dev/null 2>&1; then break; fi
  sleep 0.1
done
cat <<MSG

cluster is up. In another terminal:

  export LEASEFENCE_ENDPOINTS=$endpoints
  $BIN/leasectl status
  $BIN/leasectl acquire jobs/42 --ttl 30s --holder me

Kill any one node (kill -9 <pid>) and keep acquiring. Ctrl-C stops all three.
MSG
wait -n || true
# One node exited on its own: keep serving with the other two until Ctrl-C.
echo "a node exited; the other two keep serving (Ctrl-C to stop)"
wait || true
