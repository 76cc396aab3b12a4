#!/usr/bin/env bash
# make bench, the scale part: a large tree lent over the live mount, side
# by side with the go-fuse loopback of the same tree (FUSE alone) in one
# run. A tree of SCALE_DIRS directories (default 24,000) with
# SCALE_FILES_PER_DIR files each (default 4), and one directory of
# SCALE_WIDE entries (default 50,000). Measured:
#   - admission: export to the agent running (the delegator walks the tree
#     to admit it), against a local `find` of the tree;
#   - a stat walk (find -ls) cold (the page cache dropped) and warm, through
#     the loopback and through the mount, and cold by find -printf '%s\n';
#   - listing the wide directory (ls -f, then ls -l for the stats), cold
#     and warm, both ways;
#   - a change the owner makes in the deepest directory, as seen through the
#     mount (the exact watch), worst of 10;
#   - the agent's end (it writes one file and exits) to the delegation
#     done: the executor's highlights and the mount's end.
# Prints a table and writes $BENCH_OUT/scale.tsv.
#
# Env: BIN (default ./bin), BENCH_OUT (default ./bin/bench), SCALE_DIRS,
# SCALE_FILES_PER_DIR, SCALE_WIDE. Needs root and /dev/fuse.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$ROOT/bin}
OUT=${BENCH_OUT:-$ROOT/bin/bench}
DIRS=${SCALE_DIRS:-24000}
PER=${SCALE_FILES_PER_DIR:-4}
WIDE=${SCALE_WIDE:-50000}
[ "$(id -u)" = 0 ] || { echo "bench: needs root" >&2; exit 2; }
[ -e /dev/fuse ] || { echo "bench: needs /dev/fuse" >&2; exit 2; }

B=$(mktemp -d /tmp/awcp-scale.XXXXXX)
mkdir -p "$B"/{src,run,work,mnt-loop} "$OUT"
pids=()
cleanup() {
	set +e
	[ -n "${AWCP_ID:-}" ] && "$BIN/awcp-ctl" --state-dir "$B/ctl" cancel "$AWCP_ID" >/dev/null 2>&1
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	sleep 0.5
	grep -q " $B/" /proc/self/mountinfo && echo "bench: mounts left under $B" >&2
	rm -rf "$B"
}
trap cleanup EXIT INT TERM
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() {
	local n=$(($1 * 10)); shift
	until "$@" >/dev/null 2>&1; do n=$((n - 1)); [ $n -gt 0 ] || return 1; sleep 0.1; done
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }

echo "bench: making a tree of $DIRS directories, $PER files each, and one of $WIDE entries"
python3 - "$B/src" "$DIRS" "$PER" "$WIDE" <<'PY'
import os, sys
root, dirs, per, wide = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
# 40 wide at the top, the rest in chains below them: some depth, as a repo has
for i in range(dirs):
    d = os.path.join(root, "t%02d" % (i % 40), *["d%d" % (i // 40 // 50), "e%d" % (i // 40 % 50)]) if i >= 40 else os.path.join(root, "t%02d" % i)
    os.makedirs(d, exist_ok=True)
    for f in range(per):
        with open(os.path.join(d, "f%d.txt" % f), "w") as fh:
            fh.write("x" * 64)
w = os.path.join(root, "wide")
os.makedirs(w, exist_ok=True)
for i in range(wide):
    open(os.path.join(w, "n%06d" % i), "w").close()
PY
DEEP=$(cd "$B/src" && find . -type d | awk -F/ '{ print NF, $0 }' | sort -n | tail -1 | cut -d' ' -f2-)
ENTRIES=$(find "$B/src" | wc -l)

(cd "$ROOT" && go build -o "$B/run/loopmount" ./test/bench/loopmount)
"$B/run/loopmount" "$B/mnt-loop" "$B/src" >"$B/run/loopmount.log" 2>&1 &
pids+=($!)

PORT=$(free_port)
"$BIN/awcp-fs" serve --state-dir "$B/exec" --work-root "$B/work" --listen "127.0.0.1:$PORT" --max-ttl 24h \
	--sandbox-allow "$B/run:rw" --agent-cmd "echo \"\$AWCP_WORKDIR\" > '$B/run/workdir'; while [ ! -e '$B/run/finish' ]; do sleep 0.02; done; echo made > result.txt" \
	>"$B/run/awcp-fs.log" 2>&1 &
pids+=($!)
"$BIN/awcp-ctl" --state-dir "$B/ctl" serve --ssh-listen 127.0.0.1:0 --max-files 2000000 >"$B/run/awcp-ctl.log" 2>&1 &
pids+=($!)
wait_for 10 test -S "$B/ctl/ctl.sock"
wait_for 10 grep -q listening "$B/run/awcp-fs.log"
wait_for 10 grep -q " $B/mnt-loop " /proc/self/mountinfo

drop
t0=$(now)
find "$B/src" >/dev/null
FIND_LOCAL=$(since "$t0")
drop
t0=$(now)
AWCP_ID=$("$BIN/awcp-ctl" --state-dir "$B/ctl" export "$B/src" --peer "https://127.0.0.1:$PORT" --peer-key "$("$BIN/awcp-fs" id --state-dir "$B/exec" | head -1)" \
	--transport sshfs --ttl 12h --background --prompt "scale: the agent waits")
wait_for 120 test -s "$B/run/workdir" || { echo "bench: the delegation did not start" >&2; cat "$B/run/"*.log >&2; exit 1; }
RUNNING=$(since "$t0")
MNT=$(cat "$B/run/workdir")
# From the export command to START (admission's walk, INVITE, ACCEPT), as
# the record has it; to running adds the executor's mount and its scan of
# the tree before the task.
ADMIT=$("$BIN/awcp-ctl" --state-dir "$B/ctl" status "$AWCP_ID" --json | T0=$t0 python3 -c '
import json, os, re, sys
from datetime import datetime
d = json.load(sys.stdin)
at = {t["to"]: t["at"] for t in d.get("transitions", [])}
p = lambda s: datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", s.replace("Z", "+00:00")))
print("%.3f" % (p(at["started"]).timestamp() - float(os.environ["T0"])))')

declare -A R
walk() { # walk NAME DIR: cold and warm stat walks
	drop
	local t0
	t0=$(now); find "$2" -ls >/dev/null; R[$1.walk_cold]=$(since "$t0")
	t0=$(now); find "$2" -ls >/dev/null; R[$1.walk_warm]=$(since "$t0")
	# The harsher walk: -ls spends as long again on each entry in find
	# itself (user and group names, formatting), alike on both sides,
	# which halves the ratio; -printf '%s' stats each entry and no more.
	drop
	t0=$(now); find "$2" -printf '%s\n' >/dev/null; R[$1.walk_cold_printf]=$(since "$t0")
	drop
	t0=$(now); ls -f "$2/wide" | wc -l >/dev/null; R[$1.wide_names_cold]=$(since "$t0")
	t0=$(now); ls -l "$2/wide" >/dev/null; R[$1.wide_stat_warm]=$(since "$t0")
}
walk goloop "$B/mnt-loop"
walk awcp "$MNT"

# The owner's change in the deepest directory, seen through the mount.
SEEN=$(python3 - "$B/src/$DEEP" "$MNT/$DEEP" <<'PY'
import os, sys, time
src, mnt = sys.argv[1], sys.argv[2]
worst = 0
for i in range(10):
    name = "probe-%d" % i
    os.path.exists(os.path.join(mnt, name))
    with open(os.path.join(src, name), "w") as f:
        f.write("x")
    t0 = time.monotonic()
    while not os.path.exists(os.path.join(mnt, name)):
        if time.monotonic() - t0 > 5:
            break
        time.sleep(0.0005)
    worst = max(worst, (time.monotonic() - t0) * 1000)
print("%.1f" % worst)
PY
)
CTL_RSS=$(awk '/^VmRSS/ { printf "%d", $2 / 1024 }' "/proc/${pids[2]}/status")

# The agent's end to the delegation's: the agent writes a file and exits;
# `output --block` returns as the delegation ends (0: completed).
t0=$(now)
touch "$B/run/finish"
"$BIN/awcp-ctl" --state-dir "$B/ctl" output "$AWCP_ID" --block --timeout 2m >/dev/null ||
	{ echo "bench: the delegation did not complete" >&2; cat "$B/run/"*.log >&2; exit 1; }
DONE=$(since "$t0")
[ "$(cat "$B/src/result.txt")" = made ] || { echo "bench: the agent's file is not in the tree" >&2; exit 1; }
AWCP_ID="" # ended: nothing to cancel

echo
echo "== scale: $DIRS directories, $ENTRIES entries in all, a directory of $WIDE (seconds unless said)"
{
	printf "%-26s %10s %10s %8s\n" "" "goloop" "awcp" "ratio"
	for k in walk_cold walk_cold_printf walk_warm wide_names_cold wide_stat_warm; do
		awk -v k="$k" -v g="${R[goloop.$k]}" -v a="${R[awcp.$k]}" 'BEGIN { printf "%-26s %10.3f %10.3f %8.2f\n", k, g, a, (g > 0) ? a / g : 0 }'
	done
	printf "%-26s %10s %10s\n" "export→START (admission)" "find $FIND_LOCAL" "$ADMIT"
	printf "%-26s %21s\n" "export→running" "$RUNNING"
	printf "%-26s %21s\n" "owner's change seen, worst" "${SEEN} ms"
	printf "%-26s %21s\n" "agent's end→done" "$DONE"
	printf "%-26s %21s\n" "delegator RSS after" "${CTL_RSS} MiB"
} | tee "$B/run/table.txt"
{
	echo -e "metric\tgoloop\tawcp"
	for k in walk_cold walk_cold_printf walk_warm wide_names_cold wide_stat_warm; do echo -e "$k\t${R[goloop.$k]}\t${R[awcp.$k]}"; done
	echo -e "export_to_start_s\t$FIND_LOCAL\t$ADMIT"
	echo -e "export_to_running_s\t\t$RUNNING"
	echo -e "change_seen_worst_ms\t\t$SEEN"
	echo -e "end_to_done_s\t\t$DONE"
} >"$OUT/scale.tsv"
