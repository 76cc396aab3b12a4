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
# A goal missed is reported, never an exit status: this is a report.
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
		awk -F'\t' -v mode="$mode" '
			BEGIN {
				# The goals of issue 59 (and 30, for the rest): x loopback at most,
				# vs sshfs at least. Warm runs are held to the loopback only.
				lo["seq_read"] = 1.5; lo["seq_write"] = 1.5; lo["small_create"] = 1.5; lo["untar"] = 1.5
				lo["git_workflow"] = 1.5; lo["stat_walk"] = 1.5; lo["grep_tree"] = 1.5; lo["rm_tree"] = 1.5
				if (mode == "cold") { ss["small_create"] = 2; ss["untar"] = 2; ss["git_workflow"] = 2; ss["seq_read"] = 2 }
			}
			NR == 1 || $1 ~ /^(cost|notify_)/ { next }
			{
				w = $1 "." mode
				if ($1 == "fio_randread_direct_iops" && mode == "cold") printf "%s\t%s\t%s\n", w, $5, ">= 9000"
				if ($5 == "FAIL") { $7 = $8 = "FAIL" } # the workload failed on awcp: said, not left out
				if ($7 != "-") printf "%s.x_loopback\t%s\t%s\n", w, $7, ($1 in lo) ? "<= " lo[$1] : ""
				if ($8 != "-") printf "%s.vs_sshfs\t%s\t%s\n", w, $8, ($1 in ss) ? ">= " ss[$1] : ""
			}' "$f"
	done
	# dbench.tsv: metric local goloop sshfs awcp
	[ -f "$DIR/dbench.tsv" ] && awk -F'\t' '$1 == "throughput_mb_s" && $5 > 0 && $3 > 0 && $4 > 0 {
		printf "dbench.x_loopback\t%.2f\t%s\n", $3 / $5, "<= 1.5"
		printf "dbench.vs_sshfs\t%.2f\t%s\n", $5 / $4, ">= 2"
	}' "$DIR/dbench.tsv"
	# scale.tsv: metric goloop awcp
	[ -f "$DIR/scale.tsv" ] && awk -F'\t' '
		$1 == "walk_cold" && $2 > 0 { printf "scale.walk_cold.x_loopback\t%.2f\t%s\n", $3 / $2, "<= 1.2" }
		$1 == "walk_cold_printf" && $2 > 0 { printf "scale.walk_cold_printf.x_loopback\t%.2f\t%s\n", $3 / $2, "<= 1.2" }
		$1 == "export_to_start_s" && $2 > 0 { printf "scale.export_to_start.x_find\t%.2f\t%s\n", $3 / $2, "<= 1.5" }' "$DIR/scale.tsv"
	# ops.tsv: op build delegator_us executor_us total_us wall_us total_vs_first
	[ -f "$DIR/ops.tsv" ] && awk -F'\t' 'NR > 1 {
		printf "ops.%s.%s.cpu_us\t%s\t\n", $1, $2, $5
		if ($7 != "-" && $7 != "1.00") printf "ops.%s.%s.x_first\t%s\t\n", $1, $2, $7
	}' "$DIR/ops.tsv"
	# build.tsv: target work_s total_s vs_local
	[ -f "$DIR/build.tsv" ] && awk -F'\t' 'NR > 1 && $1 != "local" { printf "build.%s.x_local\t%s\t%s\n", $1, $4, ($1 == "git") ? "<= 1.2" : "" }' "$DIR/build.tsv"
	true
} >"$DIR/summary.tsv"

echo
echo "== summary of $DIR (build $BUILD): ratios of medians of interleaved rounds"
awk -F'\t' '
	/^#/ { next }
	function met(v, g,   op, x) {
		if (g == "") return ""
		split(g, p, " "); op = p[1]; x = p[2] + 0
		if (v == "" || v == "-" || v == "FAIL") return "no result"
		return ((op == "<=" && v + 0 <= x) || (op == ">=" && v + 0 >= x)) ? "met" : "MISSED"
	}
	{ m = met($2, $3); if (m == "MISSED") missed++; printf "%-42s %10s  %-8s %s\n", $1, $2, $3, m }
	END { printf "goals missed: %d  (x_loopback: times slower than FUSE alone, lower is better; vs_sshfs: times faster than sshfs, higher is better)\n", missed }' "$DIR/summary.tsv"
echo "TSV: $DIR/summary.tsv (compare two runs: test/bench/summary.sh DIR_A DIR_B)"
