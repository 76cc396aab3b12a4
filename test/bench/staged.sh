#!/usr/bin/env bash
# make bench, the staging part: what --snapshot staged costs on the live
# mount. Two delegations between one awcp-ctl serve and one awcp-fs serve,
# one in auto mode (the agent's writes go to the owner's directory) and one
# staged (they go to the delegation's staging area, copied up on first
# write), each live-mounted; workloads.sh (no fio) runs on both mounts,
# interleaved, for BENCH_ROUNDS rounds (default 5). Prints the medians of
# each workload side by side with the ratio staged/auto, and writes them as
# TSV to $BENCH_OUT/staged.tsv. The staged delegation's owner directory is
# checked to be untouched at the end.
#
# Env: BIN (default ./bin), BENCH_ROUNDS (default 5), BENCH_OUT (default
# ./bin/bench). Needs root and /dev/fuse (drop_caches, the mounts).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$ROOT/bin}
ROUNDS=${BENCH_ROUNDS:-5}
WORKLOADS=$ROOT/test/bench/workloads.sh
OUT=${BENCH_OUT:-$ROOT/bin/bench}
[ "$(id -u)" = 0 ] || { echo "bench: needs root" >&2; exit 2; }
[ -e /dev/fuse ] || { echo "bench: needs /dev/fuse" >&2; exit 2; }
command -v git >/dev/null || { echo "bench: needs git" >&2; exit 2; }

B=$(mktemp -d /tmp/awcp-staged-bench.XXXXXX)
mkdir -p "$B"/{auto,staged,run,work,results} "$OUT"
pids=()
cleanup() {
	set +e
	for id in ${IDS:-}; do "$BIN/awcp-ctl" --state-dir "$B/ctl" cancel "$id" >/dev/null 2>&1; done
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	sleep 0.5
	grep -q " $B/" /proc/self/mountinfo && echo "bench: mounts left under $B" >&2
	rm -rf "$B"
}
trap cleanup EXIT INT TERM
[ -n "${BENCH_KEEP:-}" ] && trap - EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() {
	local n=$(($1 * 10)); shift
	until "$@" >/dev/null 2>&1; do n=$((n - 1)); [ $n -gt 0 ] || return 1; sleep 0.1; done
}

# Owner files both delegations start from: the workloads' own, plus a
# README each, so that the staged one has something of the owner's.
echo "owner's file" >"$B/auto/README"
echo "owner's file" >"$B/staged/README"

PORT=$(free_port)
"$BIN/awcp-fs" serve --state-dir "$B/exec" --work-root "$B/work" --listen "127.0.0.1:$PORT" --max-ttl 24h --sandbox-allow "$B/run:rw" \
	--agent-cmd "echo \"\$AWCP_WORKDIR\" > '$B/run/'\"\$AWCP_PROMPT\"; exec sleep 100000" >"$B/run/awcp-fs.log" 2>&1 &
pids+=($!)
"$BIN/awcp-ctl" --state-dir "$B/ctl" serve --ssh-listen 127.0.0.1:0 >"$B/run/awcp-ctl.log" 2>&1 &
pids+=($!)
wait_for 10 test -S "$B/ctl/ctl.sock"
wait_for 10 grep -q listening "$B/run/awcp-fs.log"
IDS=""
declare -A MNT
# --allow-git-control: git_workflow makes a repository in the mount, whose
# .git/config and hooks a delegation otherwise keeps read-only to the agent
# (git_workflow and rm_tree failed on both mounts without it, unseen).
for mode in auto staged; do
	IDS="$IDS $("$BIN/awcp-ctl" --state-dir "$B/ctl" export "$B/$mode" --peer "https://127.0.0.1:$PORT" --peer-key "$("$BIN/awcp-fs" id --state-dir "$B/exec" | head -1)" \
		--transport sshfs --ttl 12h --background --snapshot "$mode" --allow-git-control --prompt "$mode")"
	wait_for 20 test -s "$B/run/$mode" || { echo "bench: the $mode delegation did not start" >&2; cat "$B/run/"*.log >&2; exit 1; }
	MNT[$mode]=$(cat "$B/run/$mode")
	wait_for 10 grep -q " ${MNT[$mode]} " /proc/self/mountinfo || { echo "bench: ${MNT[$mode]} is not mounted" >&2; exit 1; }
done
before=$(cd "$B/staged" && find . -printf '%p %s %T@\n' | sort | sha256sum)

export WORKLOADS_CACHE=${WORKLOADS_CACHE:-/tmp/awcp-workloads}
echo "bench: $ROUNDS round(s) of auto and staged, interleaved"
for r in $(seq "$ROUNDS"); do
	for mode in auto staged; do
		printf 'bench: round %d %-6s ' "$r" "$mode"
		start=$(date +%s)
		"$WORKLOADS" -F "${MNT[$mode]}" >"$B/results/$mode.r$r.txt" 2>>"$B/results/$mode.err" || true
		echo "$(($(date +%s) - start))s"
	done
done
after=$(cd "$B/staged" && find . -printf '%p %s %T@\n' | sort | sha256sum)
[ "$before" = "$after" ] || { echo "bench: the staged delegation's directory changed" >&2; exit 1; }

"$WORKLOADS" -m "$B"/results/auto.r*.txt >"$B/results/auto.txt"
"$WORKLOADS" -m "$B"/results/staged.r*.txt >"$B/results/staged.txt"
echo
echo "== the live mount, auto against staged (medians of $ROUNDS rounds, seconds)"
awk -v tsv="$OUT/staged.tsv" '
	/^#/ { next }
	FNR == NR { auto[$1] = $2; order[++n] = $1; next }
	{ staged[$1] = $2 }
	END {
		printf "%-14s %10s %10s %8s\n", "workload", "auto", "staged", "ratio"
		print "workload\tauto_s\tstaged_s\tratio" > tsv
		for (i = 1; i <= n; i++) {
			w = order[i]
			r = (auto[w] > 0 && staged[w] != "FAIL" && auto[w] != "FAIL") ? sprintf("%.2f", staged[w] / auto[w]) : "-"
			printf "%-14s %10s %10s %8s\n", w, auto[w], staged[w], r
			printf "%s\t%s\t%s\t%s\n", w, auto[w], staged[w], r > tsv
		}
	}' "$B/results/auto.txt" "$B/results/staged.txt"
du -sh "$B/ctl/staged" 2>/dev/null | awk '{ print "staging areas on disk after the rounds: " $1 }'
# A workload that failed is a benchmark that no longer runs: said, and
# make bench fails.
if grep -q ' FAIL$' "$B/results/auto.txt" "$B/results/staged.txt"; then
	echo "bench: a workload failed; what it said:" >&2
	tail -20 "$WORKLOADS_CACHE/workloads.log" >&2
	exit 1
fi
