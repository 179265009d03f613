#!/usr/bin/env bash
# embedded-demo runs three instances of examples/embedded, an application
# that embeds a leasefence node, on loopback (make embedded-demo):
#
#   1. the three elect one writer, which writes a report into a shared bbolt
#      store, every write checked by a fence guard;
#   2. the writer is frozen (SIGSTOP) while it prepares a section, longer
#      than its lease; another instance becomes the writer with a higher
#      token; thawed, the old writer's write is refused as stale;
#   3. the current writer is killed with kill -9 and restarted on its data
#      dir: the next writer's token continues above every earlier one;
#   4. the report shows the tokens of its sections never decreasing.
#
# DIR (default run-data/embedded-demo) holds the data dirs, logs and the
# shared store; it is emptied first. PORT (default 7101) is the first of the
# three ports.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
DIR=${DIR:-run-data/embedded-demo}
PORT=${PORT:-7101}
BIN=bin/embedded

$GO build -o "$BIN" ./examples/embedded
rm -rf "$DIR"
mkdir -p "$DIR"
PEERS="n1=127.0.0.1:$PORT,n2=127.0.0.1:$((PORT + 1)),n3=127.0.0.1:$((PORT + 2))"
declare -A PID

start() { # start ID: runs instance ID in the background, logging to DIR/ID.log
	local id=$1 port=$((PORT + ${1#n} - 1))
	"$BIN" -id "$id" -listen "127.0.0.1:$port" -peers "$PEERS" -insecure \
		-data-dir "$DIR/$id" -store "$DIR/shared/report.db" >>"$DIR/$id.log" 2>&1 &
	PID[$id]=$!
}

stop_all() {
	for id in "${!PID[@]}"; do
		kill -CONT "${PID[$id]}" 2>/dev/null || true
		kill -TERM "${PID[$id]}" 2>/dev/null || true
	done
	wait 2>/dev/null || true
}
trap stop_all EXIT

# wait_line PATTERN [SECONDS]: waits until a log line written from now on
# matches PATTERN and prints it (the first such line of any instance).
mark() { for id in n1 n2 n3; do MARK[$id]=0; if [[ -f $DIR/$id.log ]]; then MARK[$id]=$(wc -l <"$DIR/$id.log"); fi; done; }
declare -A MARK
wait_line() {
	local pat=$1 deadline=$((SECONDS + ${2:-30}))
	while ((SECONDS < deadline)); do
		for id in n1 n2 n3; do
			local line
			line=$(tail -n +$((MARK[$id] + 1)) "$DIR/$id.log" 2>/dev/null | grep -m1 -E "$pat" || true)
			if [[ -n $line ]]; then
				echo "$line"
				return 0
			fi
		done
		sleep 0.1
	done
	echo "embedded-demo: no line matching '$pat' within ${2:-30}s; logs in $DIR" >&2
	exit 1
}
say() { printf '\n== %s\n' "$*"; }

say "three application instances, each embedding a node ($PEERS)"
mark
for id in n1 n2 n3; do start "$id"; done
line=$(wait_line 'wrote section 1 with token')
echo "$line"
W=${line%%:*}

say "freeze the writer $W (SIGSTOP) while it prepares a section, for longer than its lease"
mark
wait_line "^$W: preparing section" >/dev/null
kill -STOP "${PID[$W]}"
echo "$W frozen"
mark
line=$(wait_line 'wrote section [0-9]+ with token')
echo "$line"
W2=${line%%:*}
say "thaw $W: its prepared section goes to the store with its old token"
mark
kill -CONT "${PID[$W]}"
wait_line "^$W: write refused: stale token"

say "kill -9 the writer $W2, then restart it on its data dir"
mark
kill -KILL "${PID[$W2]}"
wait "${PID[$W2]}" 2>/dev/null || true
echo "$W2 killed"
wait_line 'writer with token'
start "$W2"
wait_line "^$W2: started"

say "the report in the shared store"
mark
wait_line 'wrote section [0-9]+ with token' >/dev/null
stop_all
trap - EXIT
"$BIN" -show -store "$DIR/shared/report.db" | tail -n 12
"$BIN" -show -store "$DIR/shared/report.db" | awk '
	/^[0-9]+ token / { t = $3 + 0; if (t < last) { print "embedded-demo: token " t " after " last; bad = 1 } last = t }
	END { if (bad) exit 1; print "tokens in the report never decrease: ok" }'
echo "logs and data: $DIR"
