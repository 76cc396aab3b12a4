#!/usr/bin/env bash
# make bench's last word: one table of what the run measured, as ratios to
# the go-fuse loopback (FUSE alone) and to sshfs, each beside its goal,
# from the TSV files the parts wrote (fs.tsv, fs-warm.tsv, dbench.tsv,
# scale.tsv, ops.tsv, build.tsv: whichever are there). Every figure is a
# median of rounds interleaved within that run, so two runs — of two
# commits, or two machines — compare by their ratios, not their seconds.
#
#   summary.sh [DIR]        the run in DIR (default ./bin/bench); also
#                           writes DIR/summary.tsv
#   summary.sh DIR_A DIR_B  two runs side by side (their summary.tsv)
#
# The goals are test/bench/goals.tsv's, as the filesystem table's are. A
# goal missed is reported, never an exit status: this is a report.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

if [ $# -eq 2 ]; then
	for d in "$1" "$2"; do
		[ -f "$d/summary.tsv" ] || { echo "summary: no $d/summary.tsv (run summary.sh $d first)" >&2; exit 2; }
	done
	awk -F'\t' '
		FNR == 1 { f++ }
		/^#/ { if ($0 ~ /^# build/) build[f] = $2; next }
		f == 1 { a[$1] = $2; goal[$1] = $3; order[++n] = $1; next }
		{ b[$1] = $2; if (!($1 in a)) { goal[$1] = $3; order[++n] = $1 } }
		END {
			printf "%-42s %12s %12s  %s\n", "", build[1], build[2], "goal"
			for (i = 1; i <= n; i++) { k = order[i]; printf "%-42s %12s %12s  %s\n", k, (k in a) ? a[k] : "-", (k in b) ? b[k] : "-", goal[k] }
		}' "$1/summary.tsv" "$2/summary.tsv"
	exit 0
fi

# goaled PROGRAM FILE...: awk on TSV with goals.awk's goal(), meets() and
# row(KEY, VALUE, GOAL), a line of summary.tsv.
goaled() {
	local prog=$1
	shift
	awk -F'\t' -v goals="$ROOT/test/bench/goals.tsv" -f "$ROOT/test/bench/goals.awk" -f <(printf '%s\n' "$prog") "$@"
}

DIR=${1:-$ROOT/bin/bench}
[ -d "$DIR" ] || { echo "summary: no bench results in $DIR" >&2; exit 2; }
BUILD=$(cat "$DIR/version" 2>/dev/null || echo unknown)

{
	printf '# build\t%s\n' "$BUILD"
	# fs.tsv: workload local goloop sshfs awcp x_local x_goloop vs_sshfs target
	for mode in cold warm; do
		f=$DIR/fs.tsv
		[ "$mode" = warm ] && f=$DIR/fs-warm.tsv
		[ -f "$f" ] || continue
		goaled '
			NR == 1 || $1 == "cost" { next }
			$1 == "mb_s" { row($2 "." mode ".mb_s", $6, ""); row($2 "." mode ".loopback_mb_s", $4, ""); next }
			$1 ~ /^notify_/ { row($1 "." mode, $5, goal($1, mode, "value")); next }
			{
				w = $1 "." mode
				if ((g = goal($1, mode, "value")) != "") row(w, $5, g)
				if ($5 == "FAIL") { $7 = $8 = "FAIL" } # the workload failed on awcp: said, not left out
				if ($7 != "-") row(w ".x_loopback", $7, goal($1, mode, "x_loopback"))
				if ($8 != "-") row(w ".vs_sshfs", $8, goal($1, mode, "vs_sshfs"))
			}' mode="$mode" "$f"
	done
	# dbench.tsv: metric local goloop sshfs awcp
	[ -f "$DIR/dbench.tsv" ] && goaled '$1 == "throughput_mb_s" && $5 > 0 && $3 > 0 && $4 > 0 {
		row("dbench.x_loopback", sprintf("%.2f", $3 / $5), goal("dbench", "*", "x_loopback"))
		row("dbench.vs_sshfs", sprintf("%.2f", $5 / $4), goal("dbench", "*", "vs_sshfs"))
	}' "$DIR/dbench.tsv"
	# scale.tsv: metric goloop awcp
	[ -f "$DIR/scale.tsv" ] && goaled '
		($1 == "walk_cold" || $1 == "walk_cold_printf") && $2 > 0 {
			row("scale." $1 ".x_loopback", sprintf("%.2f", $3 / $2), goal("scale." $1, "*", "x_loopback"))
		}
		$1 == "export_to_start_s" && $2 > 0 {
			find_s = $2
			row("scale.export_to_start.x_find", sprintf("%.2f", $3 / $2), goal("scale.export_to_start", "*", "x_find"))
		}
		$1 == "export_to_running_s" && find_s > 0 { row("scale.export_to_running.x_find", sprintf("%.2f", $3 / find_s), goal("scale.export_to_running", "*", "x_find")) }
		$1 == "end_to_done_s" { row("scale.end_to_done_s", $3, goal("scale.end_to_done_s", "*", "value")) }' "$DIR/scale.tsv"
	# ops.tsv: op build delegator_us executor_us total_us wall_us total_vs_first
	[ -f "$DIR/ops.tsv" ] && awk -F'\t' 'NR > 1 {
		printf "ops.%s.%s.cpu_us\t%s\t\n", $1, $2, $5
		if ($7 != "-" && $7 != "1.00") printf "ops.%s.%s.x_first\t%s\t\n", $1, $2, $7
	}' "$DIR/ops.tsv"
	# build.tsv: target work_s total_s vs_local
	[ -f "$DIR/build.tsv" ] && goaled 'NR > 1 && $1 != "local" { row("build." $1 ".x_local", $4, goal("build." $1, "*", "x_local")) }' "$DIR/build.tsv"
	true
} >"$DIR/summary.tsv"

echo
echo "== summary of $DIR (build $BUILD): ratios of medians of interleaved rounds"
goaled '
	/^#/ { next }
	function met(v, g) {
		if (g == "") return ""
		if (v == "" || v == "-" || v == "FAIL") return "no result"
		return meets(v, g) ? "met" : "MISSED"
	}
	{ m = met($2, $3); if (m == "MISSED") missed++; printf "%-42s %10s  %-8s %s\n", $1, $2, $3, m }
	END { printf "goals missed: %d  (x_loopback: times slower than FUSE alone, lower is better; vs_sshfs: times faster than sshfs, higher is better)\n", missed }' "$DIR/summary.tsv"
echo "TSV: $DIR/summary.tsv (compare two runs: test/bench/summary.sh DIR_A DIR_B)"
