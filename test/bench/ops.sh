#!/usr/bin/env bash
# make bench, the request part: the CPU each daemon spends per request
# (create, write+close, rename, unlink, stat, open) through a real
# delegation (test/bench/ops), this build against BENCH_BASE (default
# 3ab7ca7, the commit before the last round's security work) built from
# this repository's history, interleaved in one run. BENCH_BASE=none
# measures this build alone. Writes $BENCH_OUT/ops.tsv.
#
# Env: BIN (default ./bin), BENCH_OUT (default ./bin/bench), BENCH_BASE,
# OPS_N (requests of each kind a round, default 2000), OPS_ROUNDS
# (default 5). Needs root and /dev/fuse.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$ROOT/bin}
OUT=${BENCH_OUT:-$ROOT/bin/bench}
BASE=${BENCH_BASE:-3ab7ca7}
mkdir -p "$OUT"
bins=()
W=""
cleanup() { [ -n "$W" ] && git -C "$ROOT" worktree remove --force "$W" >/dev/null 2>&1; true; }
trap cleanup EXIT INT TERM
if [ "$BASE" != none ]; then
	if git -C "$ROOT" rev-parse --verify -q "$BASE^{commit}" >/dev/null; then
		W=$(mktemp -d /tmp/awcp-ops-base.XXXXXX)
		rmdir "$W"
		git -C "$ROOT" worktree add --detach "$W" "$BASE" >/dev/null 2>&1
		(cd "$W" && go build -o "$W/bin/" ./cmd/awcp-ctl ./cmd/awcp-fs)
		bins+=(-bin "$BASE=$W/bin")
	else
		echo "bench ops: $BASE is not in this clone's history; measuring this build alone" >&2
	fi
fi
bins+=(-bin "now=$BIN")
# The bench makes its requests with raw system calls on the mount: the Go
# runtime's preemption signal (SIGURG) interrupts one now and then, and
# the kernel answers it EINTR (once in a CI run: "write_close 344:
# interrupted system call"). Preemption by signal off in the bench's own
# process; benchd starts the daemons it measures without it.
cd "$ROOT" && GODEBUG=asyncpreemptoff=1 go run ./test/bench/ops "${bins[@]}" -n "${OPS_N:-2000}" -rounds "${OPS_ROUNDS:-5}" -out "$OUT/ops.tsv"
