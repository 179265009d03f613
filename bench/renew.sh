#!/usr/bin/env bash
# renew.sh: how many keep-alive renewals a three-node cluster of leased
# processes confirms (issue 16 item 2). It starts a fresh cluster on
# loopback (default settings, one process per node; the build of this tree
# unless LEASED names another), has leasebench hold LEASES leases (ttl 60 s)
# over CLIENTS clients (one keep-alive stream each) and renew each every
# INTERVAL, and prints leasebench's result: confirmed renewals/s (ops/s),
# asked and sent renewals/s, and how fast the leases were taken.
#
#   bench/renew.sh                                   # 100 000 leases every 1 s
#   LEASES=100000 INTERVAL=700ms bench/renew.sh      # asked 142 857/s
#   LEASED=/tmp/old-bin/leased LEASEBENCH=/tmp/old-bin/leasebench bench/renew.sh
#   METRICS_PORT=27201 bench/renew.sh                # and the leader's propose stages
#
# The client is part of what is measured (it packs renewals into messages):
# to measure an old build, give its own leasebench too. Ports
# 127.0.0.1:27101-27103 (LF_PORT). A tool for people, not part of
# `make test`; run it with nothing else running. Taking 100 000 leases
# takes a minute or more before the window.
set -euo pipefail
cd "$(dirname "$0")/.."
LEASES=${LEASES:-100000}
INTERVAL=${INTERVAL:-1s}
CLIENTS=${CLIENTS:-4}
DURATION=${DURATION:-30s}
WARMUP=${WARMUP:-5s}
LF_PORT=${LF_PORT:-27101}
GO=${GO:-go}

. bench/lib.sh
bench_workdir renew
start_leased "$LF_PORT" "$WORK/data" "$WORK/log"
sleep 3
"${LEASEBENCH:-$WORK/bin/leasebench}" --endpoints "$lf_endpoints" --workload renew --concurrency "$CLIENTS" \
  --leases "$LEASES" --ttl 60s --keepalive-interval "$INTERVAL" --duration "$DURATION" --warmup "$WARMUP"
if [ -n "${METRICS_PORT:-}" ]; then stage_means "$(basename "${LEASED:-leased}")"; fi
