#!/usr/bin/env bash
# make bench, the build part: a generated C project of about 2,000 files
# (1,000 sources, 1,000 headers, a Makefile), and one workload on it — a
# full build, an incremental build after one change, then 20 `git status`
# and 20 `git grep` — run on local disk, by an agent on the live mount,
# and by an agent on the git transport's clone, side by side, for
# BENCH_ROUNDS rounds (medians). For the two delegations the agent times
# its own work; the git transport's clone (from START to the agent's
# start) and return (the agent's end to the delegation's end, the push and
# the three-way apply) are shown apart, and in its total.
#
# Writes $BENCH_OUT/build.tsv (default ./bin/bench).
#
# Env: BIN (the binaries, default ./bin), BENCH_ROUNDS (default 3),
# BUILD_FILES (sources, default 1000). Needs gcc, make and git; root for
# the live mount.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$ROOT/bin}
ROUNDS=${BENCH_ROUNDS:-3}
N=${BUILD_FILES:-1000}
for tool in gcc make git; do
	command -v "$tool" >/dev/null || { echo "bench build: needs $tool" >&2; exit 2; }
done
B=$(mktemp -d /tmp/awcp-build.XXXXXX)
pids=()
cleanup() {
	set +e
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	rm -rf "$B"
}
trap cleanup EXIT INT TERM
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { local n=$(($1 * 10)); shift; until "$@" >/dev/null 2>&1; do n=$((n - 1)); [ $n -gt 0 ] || return 1; sleep 0.1; done; }
now() { date +%s.%N; }

# --- the project: src/fNNNN.c each including its header and one shared ---
mkdir -p "$B/template/src" "$B/template/include" "$B/run"
{
	echo "#define SHARED_VALUE 7"
} >"$B/template/include/shared.h"
for i in $(seq -f %04g 1 "$N"); do
	printf '#ifndef F%s_H\n#define F%s_H\nint f%s(int x);\n#endif\n' "$i" "$i" "$i" >"$B/template/include/f$i.h"
	printf '#include "shared.h"\n#include "f%s.h"\n/* needle%s */\nint f%s(int x) {\n\tint y = x * SHARED_VALUE;\n\tfor (int k = 0; k < 8; k++)\n\t\ty = (y << 1) ^ (k + %d);\n\treturn y;\n}\n' \
		"$i" "$i" "$i" "$((10#$i))" >"$B/template/src/f$i.c"
done
printf 'int main(void) { return 0; }\n' >"$B/template/src/main.c"
cat >"$B/template/Makefile" <<'EOF'
SRC := $(wildcard src/*.c)
OBJ := $(SRC:.c=.o)
CFLAGS := -O1 -Iinclude
prog: $(OBJ)
	$(CC) -o $@ $(OBJ)
src/%.o: src/%.c include/shared.h
	$(CC) $(CFLAGS) -c -o $@ $<
EOF
printf '*.o\nprog\n' >"$B/template/.gitignore"
(cd "$B/template" && git init -q && git add -A && git -c user.name=bench -c user.email=b@x commit -qm project)

# --- the workload, as the agent runs it (and as it runs on local disk) ---
cat >"$B/run/work.sh" <<'EOF'
#!/bin/bash
set -e
J=$(nproc)
t() { date +%s.%N; }
start=$(t)
make -s -j"$J" prog >/dev/null
full=$(t)
sed -i 's/y = x \* SHARED_VALUE/y = x * SHARED_VALUE + 1/' src/f0007.c
make -s -j"$J" prog >/dev/null
incr=$(t)
for i in $(seq 20); do git status --porcelain >/dev/null; done
status=$(t)
for i in $(seq 20); do git grep -q needle0007; done
grep=$(t)
awk -v s="$start" -v f="$full" -v i="$incr" -v st="$status" -v g="$grep" \
	'BEGIN { printf "WORK start=%s end=%s full=%.2f incr=%.2f status=%.2f grep=%.2f\n", s, g, f-s, i-f, st-i, g-st }'
EOF
chmod +x "$B/run/work.sh"

# --- an executor and a delegator daemon ---
PORT=$(free_port)
"$BIN/awcp-fs" serve --state-dir "$B/exec" --work-root "$B/work" --listen "127.0.0.1:$PORT" --plain-http --sandbox-allow "$B/run" \
	--max-ttl 2h --agent-cmd "bash '$B/run/work.sh' 2>&1" >"$B/run/awcp-fs.log" 2>&1 &
pids+=($!)
"$BIN/awcp-ctl" --state-dir "$B/ctl" serve --ssh-listen 127.0.0.1:0 >"$B/run/awcp-ctl.log" 2>&1 &
pids+=($!)
wait_for 10 test -S "$B/ctl/ctl.sock"
wait_for 10 grep -q listening "$B/run/awcp-fs.log"

fresh() { rm -rf "$B/p"; cp -a "$B/template" "$B/p"; }
declare -A R
run_local() {
	fresh
	out=$(cd "$B/p" && bash "$B/run/work.sh")
	echo "$out" | sed -n 's/^WORK //p'
}
run_delegated() { # transport → the agent's WORK line, then total= of the delegation
	fresh
	local t0 t1 id out
	t0=$(now)
	id=$("$BIN/awcp-ctl" --state-dir "$B/ctl" export "$B/p" --peer "http://127.0.0.1:$PORT" --plain-http \
		--transport "$1" --ttl 1h --background --prompt "build it")
	"$BIN/awcp-ctl" --state-dir "$B/ctl" output "$id" --block --timeout 1h >"$B/run/out.txt" 2>&1 || { grep -v "^  [AMD] " "$B/run/out.txt" >&2; "$BIN/awcp-ctl" --state-dir "$B/ctl" status "$id" --json | grep -A3 -i stderr >&2; exit 1; }
	t1=$(now)
	out=$(sed -n 's/.*WORK //p' "$B/run/out.txt" | tail -n 1)
	echo "$out t0=$t0 t1=$t1"
}
field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

echo "bench build: $N sources; $ROUNDS round(s) of local, live, git"
for r in $(seq "$ROUNDS"); do
	for target in local live git; do
		if [ "$target" = local ]; then line=$(run_local); else line=$(run_delegated "$target"); fi
		for k in full incr status grep; do R[$target.$k.$r]=$(field "$line" "$k"); done
		if [ "$target" != local ]; then
			s=$(field "$line" start); e=$(field "$line" end); t0=$(field "$line" t0); t1=$(field "$line" t1)
			R[$target.setup.$r]=$(awk -v a="$t0" -v b="$s" 'BEGIN { printf "%.2f", b-a }')
			R[$target.return.$r]=$(awk -v a="$e" -v b="$t1" 'BEGIN { printf "%.2f", b-a }')
		fi
	done
done
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2 }'; }
med() { local v=(); for r in $(seq "$ROUNDS"); do v+=("${R[$1.$2.$r]:-0}"); done; median "${v[@]}"; }
printf '\n%-10s %8s %8s %8s %8s %10s %8s %8s %10s %10s\n' target full incr status grep "work (s)" setup return total "vs local"
lw=0
OUT=${BENCH_OUT:-$ROOT/bin/bench}
mkdir -p "$OUT"
printf 'target\twork_s\ttotal_s\twork_vs_local\n' >"$OUT/build.tsv"
for target in local live git; do
	f=$(med $target full); i=$(med $target incr); s=$(med $target status); g=$(med $target grep)
	w=$(awk -v a="$f" -v b="$i" -v c="$s" -v d="$g" 'BEGIN { printf "%.2f", a+b+c+d }')
	su=$(med $target setup); re=$(med $target return)
	[ "$target" = local ] && { su=0; re=0; lw=$w; }
	tot=$(awk -v a="$w" -v b="$su" -v c="$re" 'BEGIN { printf "%.2f", a+b+c }')
	ratio=$(awk -v a="$w" -v b="$lw" 'BEGIN { printf "%.2fx", a/b }')
	printf '%-10s %8s %8s %8s %8s %10s %8s %8s %10s %10s\n' "$target" "$f" "$i" "$s" "$g" "$w" "$su" "$re" "$tot" "$ratio"
	printf '%s\t%s\t%s\t%s\n' "$target" "$w" "$tot" "${ratio%x}" >>"$OUT/build.tsv"
done
echo "(work: the agent's own time; setup: START to the agent's start — the git transport's clone; return: the agent's end to the"
echo " delegation's end — the push and the three-way apply; vs local: the work's ratio to local disk; goal for git: ≤ 1.20x)"
