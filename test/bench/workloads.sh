#!/usr/bin/env bash
# workloads.sh: the filesystem workloads of make bench, run once in a
# directory, each timed; prints "name value" lines (seconds, or IOPS for
# the fio rows), a "FAIL" value for a workload that failed.
#
#   workloads.sh [-C] [-F] DIR    run in DIR (a scratch subdirectory is made
#                                 and removed); -C keeps the page cache
#                                 (warm), else it is dropped before each
#                                 read workload (root); -F skips fio
#   workloads.sh -m FILE...       the median of each row over result files
#
# WORKLOADS_QUICK=1 runs smaller ones (make bench-quick).
#
# The fixtures (a tree of source-like files and its tarball, a random
# file) are made once in $WORKLOADS_CACHE (default /tmp/awcp-workloads).
set -uo pipefail

if [ "${1:-}" = -m ]; then
	shift
	awk '/^# workloads / { if (!hdr++) print; next } # the settings, once
	     /^#/ || NF < 2 { next }
	     !($1 in seen) { seen[$1] = 1; order[++n] = $1 }
	     $2 == "FAIL" { bad[$1]++; next }
	     { vals[$1] = vals[$1] " " $2 }
	     END {
	       for (i = 1; i <= n; i++) {
	         w = order[i]; k = split(vals[w], v, " ")
	         if (k == 0) { print w, "FAIL"; continue }
	         for (a = 1; a <= k; a++) for (b = a + 1; b <= k; b++) if (v[b] + 0 < v[a] + 0) { t = v[a]; v[a] = v[b]; v[b] = t }
	         m = (k % 2) ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
	         printf (w ~ /_iops$/) ? "%s %.0f\n" : "%s %.3f\n", w, m
	       }
	     }' "$@"
	exit 0
fi

WARM=0
FIO=1
while getopts "CF" opt; do
	case $opt in
	C) WARM=1 ;;
	F) FIO=0 ;;
	*) echo "usage: workloads.sh [-C] [-F] DIR | -m FILE..." >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
TARGET=${1:?usage: workloads.sh [-C] [-F] DIR}
command -v fio >/dev/null || FIO=0

CACHE=${WORKLOADS_CACHE:-/tmp/awcp-workloads}
TREE_DIRS=20 TREE_FILES=100 # 2,000 files of 1–9 KiB
SEQ_MB=256 FIO_SECONDS=5 TAG=""
if [ "${WORKLOADS_QUICK:-0}" = 1 ]; then
	# make bench-quick: the same workloads, a quarter of the files and
	# bytes, fio for 2 s; its own fixtures, and ratios of its own.
	TREE_DIRS=5 SEQ_MB=64 FIO_SECONDS=2 TAG=-quick
fi
mkdir -p "$CACHE"
TAR=$CACHE/tree$TAG.tar RANDOM_FILE=$CACHE/random$TAG
if [ ! -f "$TAR" ]; then
	echo "# workloads: making the fixtures in $CACHE (once)" >&2
	rm -rf "$CACHE/tree"
	for ((d = 0; d < TREE_DIRS; d++)); do
		mkdir -p "$CACHE/tree/pkg$d"
		for ((f = 0; f < TREE_FILES; f++)); do
			{
				printf 'package pkg%d // file %d\n' "$d" "$f"
				# one file in ten mentions the needle
				[ $((f % 10)) = 0 ] && printf 'var needle = "somestring"\n'
				head -c $((1024 * (1 + (d * TREE_FILES + f) % 9))) /dev/zero | tr '\0' 'x' | fold -w 79
				echo
			} >"$CACHE/tree/pkg$d/f$f.go"
		done
	done
	tar -C "$CACHE" -cf "$TAR.tmp" tree && mv "$TAR.tmp" "$TAR"
	rm -rf "$CACHE/tree"
fi
[ -f "$RANDOM_FILE" ] || head -c $((SEQ_MB << 20)) /dev/urandom >"$RANDOM_FILE"
HITS=$((TREE_DIRS * TREE_FILES / 10))
LOG=$CACHE/workloads.log # what a failed workload said

WD=$(mktemp -d "$TARGET/.workloads.XXXXXX") || { echo "workloads: cannot write in $TARGET" >&2; exit 2; }
trap 'rm -rf "$WD"' EXIT
cd "$WD" || exit 2

drop() {
	[ "$WARM" = 1 ] && return
	sync
	[ "$(id -u)" = 0 ] && echo 3 >/proc/sys/vm/drop_caches
}

# run NAME CMD: times CMD (a function), prints NAME and the seconds or FAIL.
run() {
	local name=$1 t0 t1
	shift
	t0=$(date +%s.%N)
	if "$@" >/dev/null 2>>"$LOG"; then
		t1=$(date +%s.%N)
		awk -v n="$name" -v a="$t0" -v b="$t1" 'BEGIN { printf "%s %.3f\n", n, b - a }'
	else
		echo "$name FAIL"
	fi
}

seq_write() { dd if="$RANDOM_FILE" of=seq.bin bs=1M conv=fsync status=none; }
seq_read() { dd if=seq.bin of=/dev/null bs=1M status=none; }
small_create() {
	local block d f
	block=$(head -c 4095 /dev/zero | tr '\0' 's')
	for ((d = 0; d < TREE_DIRS; d++)); do
		mkdir -p small/d$d || return 1
		for ((f = 0; f < 100; f++)); do printf '%s\n' "$block" >small/d$d/f$f || return 1; done
	done
}
stat_walk() { [ "$(find small -type f | wc -l)" = $((TREE_DIRS * 100)) ] && ls -lR small >/dev/null; }
untar() { tar --no-same-owner -xf "$TAR"; }
grep_tree() { [ "$(grep -r somestring tree | wc -l)" = "$HITS" ]; }
git_workflow() {
	(
		# On an awcp mount the files are the agent's user's, not the
		# runner's: git would refuse the repository as another's.
		export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'
		cd tree &&
			git init -q && git add -A && git -c user.name=bench -c user.email=bench@awcp commit -qm base &&
			for f in pkg1/f*.go; do echo "// edited" >>"$f"; done &&
			git status --porcelain >/dev/null && git diff >/dev/null &&
			git -c user.name=bench -c user.email=bench@awcp commit -qam edit &&
			git log --oneline >/dev/null
	)
}
rm_tree() { rm -rf seq.bin small tree fio; }

# fio_iops RW DIRECT: the IOPS of 4 KiB random RW for 5 s on a 64 MiB file.
fio_iops() {
	local field=8 # the terse format's read IOPS
	[ "$1" = randwrite ] && field=49
	mkdir -p fio &&
		fio --name=bench --filename=fio/file --size=64M --bs=4k --rw="$1" --direct="$2" \
			--ioengine=psync --time_based --runtime="$FIO_SECONDS" --minimal 2>>"$LOG" | awk -F';' -v f="$field" '{ print $f }'
}

echo "# workloads dir=$TARGET warm=$WARM fio=$FIO seq_mb=$SEQ_MB date=$(date -u +%FT%TZ)"
run seq_write seq_write
drop
run seq_read seq_read
run small_create small_create
drop
run stat_walk stat_walk
run untar untar
drop
run grep_tree grep_tree
run git_workflow git_workflow
if [ "$FIO" = 1 ]; then
	for rw in randread randwrite; do
		drop
		echo "fio_${rw}_iops $(fio_iops $rw 0 || echo FAIL)"
		echo "fio_${rw}_direct_iops $(fio_iops $rw 1 || echo FAIL)"
	done
fi
run rm_tree rm_tree
