#!/usr/bin/env bash
# make bench, the network part: an agent's work on a lent repository of
# about 2,000 small files, across a link that adds a round trip (2, 20 and
# 60 ms by default) — where users are, a laptop lending to a cloud region.
# This kernel has no netem: test/bench/delaylink joins two TUN devices and
# holds each packet for half the round trip; one end is in a network
# namespace of its own, where the executor (awcp-fs serve) and sshfs run,
# the other on this machine, with the delegator (awcp-ctl serve), the lent
# directory and OpenSSH for sshfs. The workloads (cold and warm git status,
# cold and warm grep -r, 500 small files created by a shell, an untar of
# 500, a 64 MiB read, 50 compiles) run on local disk, on the live mount
# (run by the agent, timing itself), on the git transport's clone (the
# same) and on sshfs (from this machine, through the mount its client
# made in the namespace), BENCH_ROUNDS rounds, each on a fresh copy.
#
# Writes $BENCH_OUT/latency.tsv: rtt_ms, target, workload, seconds
# (median), and prints a table per round trip with the issue's goals.
#
# Env: BIN, BENCH_ROUNDS (default 1), BENCH_OUT, LAT_RTTS (the links, each
# a round trip in ms, and optionally ":loss=FRACTION" and ":rate=BITS/S",
# e.g. "20:loss=0.01" or "20:rate=20e6"; default "2 20 100 200
# 20:loss=0.01 20:rate=20e6"), LAT_TARGETS (default "local live git sshfs"), LAT_FILES
# (sources, default 1000: 2,000 files with their headers), LAT_CAP
# (seconds a workload may take on sshfs before it is cut off and shown as
# ≥ that, default 120). Root; removes its namespace and devices on exit.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$ROOT/bin}
ROUNDS=${BENCH_ROUNDS:-1}
RTTS=${LAT_RTTS:-2 20 100 200 20:loss=0.01 20:rate=20e6}
TARGETS=${LAT_TARGETS:-local live git sshfs}
N=${LAT_FILES:-1000}
CAP=${LAT_CAP:-120}
OUT=${BENCH_OUT:-$ROOT/bin/bench}
NS=awcplat$$
[ "$(id -u)" = 0 ] || { echo "bench latency: needs root (a network namespace, TUN devices, mounts)" >&2; exit 2; }
tools="gcc git tar nsenter ip python3"
case " $TARGETS " in *" sshfs "*) tools="$tools sshfs /usr/sbin/sshd" ;; esac
for tool in $tools; do
	command -v "$tool" >/dev/null || { echo "bench latency: needs $tool" >&2; exit 2; }
done
[ -c /dev/net/tun ] || { echo "bench latency: needs /dev/net/tun (the delayed link's devices)" >&2; exit 2; }

B=$(mktemp -d /tmp/awcp-latency.XXXXXX)
mkdir -p "$B"/{run,ssh,sshfs,lent} "$OUT"
chmod 700 "$B/ssh"
pids=()
stop_all() {
	set +e
	fusermount3 -u -z "$B/sshfs" 2>/dev/null
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	pids=()
	[ -f "$B/ssh/sshd.pid" ] && kill "$(cat "$B/ssh/sshd.pid")" 2>/dev/null && rm -f "$B/ssh/sshd.pid"
	ip netns del "$NS" 2>/dev/null
	sleep 0.3
}
cleanup() {
	stop_all
	grep -q " $B/" /proc/self/mountinfo && echo "bench latency: mounts left under $B" >&2
	rm -rf "$B"
}
trap cleanup EXIT INT TERM
wait_for() { local n=$(($1 * 10)); shift; until "$@" >/dev/null 2>&1; do n=$((n - 1)); [ $n -gt 0 ] || return 1; sleep 0.1; done; }
in_ns() { nsenter --net="/run/netns/$NS" "$@"; } # the namespace's network, this machine's mounts

(cd "$ROOT" && go build -o "$B/run/delaylink" ./test/bench/delaylink)

# --- the repository: N sources, N headers, a Makefile; an untracked 64 MiB file ---
T=$B/template
mkdir -p "$T/src" "$T/include" "$T/data"
echo "#define SHARED_VALUE 7" >"$T/include/shared.h"
for i in $(seq -f %04g 1 "$N"); do
	printf '#ifndef F%s_H\n#define F%s_H\nint f%s(int x);\n#endif\n' "$i" "$i" "$i" >"$T/include/f$i.h"
	printf '#include "shared.h"\n#include "f%s.h"\n/* needle%s */\nint f%s(int x) {\n\tint y = x * SHARED_VALUE;\n\tfor (int k = 0; k < 8; k++)\n\t\ty = (y << 1) ^ (k + %d);\n\treturn y;\n}\n' \
		"$i" "$i" "$i" "$((10#$i))" >"$T/src/f$i.c"
done
printf '*.o\n' >"$T/.gitignore"
(cd "$T" && git init -q && git add -A && git -c user.name=bench -c user.email=b@x commit -qm project)
head -c $((64 << 20)) /dev/urandom >"$T/data/big.bin"
mkdir -p "$B/run/t500/d"
for i in $(seq 500); do echo "file $i" >"$B/run/t500/d/f$i.txt"; done
tar -C "$B/run/t500" -cf "$B/run/t500.tar" d

# --- the workloads, as the agent runs them in its workspace ---
cat >"$B/run/work.sh" <<'EOF'
#!/bin/bash
# Each workload's seconds on a line "LAT name=seconds"; one cut off after
# LAT_TIMEOUT seconds (0: never) shows as that.
t() { date +%s.%N; }
step() {
	local s e
	s=$(t)
	timeout "${LAT_TIMEOUT:-0}" bash -c "$2" >/dev/null || { echo "LAT $1=${LAT_TIMEOUT:-0} (failed or cut off)"; return; }
	e=$(t)
	awk -v n="$1" -v s="$s" -v e="$e" 'BEGIN { printf "LAT %s=%.3f\n", n, e-s }'
}
echo "LAT began_at=$(t)"
step status_cold 'git status --porcelain'
step status_warm 'git status --porcelain'
step grep_cold 'grep -r needle0007 src include'
step grep_warm 'grep -r needle0007 src include'
step create 'mkdir new && for i in $(seq 500); do echo "x $i" >new/f$i; done'
step untar "mkdir untar && tar -xf '@TAR@' -C untar"
step cat64 'cat data/big.bin'
step cc50 'mkdir -p obj && for i in $(seq -f %04g 1 50); do cc -O1 -Iinclude -c src/f$i.c -o obj/f$i.o; done'
echo "LAT ended_at=$(t)"
EOF
sed -i "s|@TAR@|$B/run/t500.tar|" "$B/run/work.sh"
chmod +x "$B/run/work.sh"

# --- the link, the two daemons, OpenSSH and sshfs, for one round trip ---
start_link() { # RTT_MS[:loss=F][:rate=B]
	local spec=$1 args=() o
	args+=(-rtt "${spec%%:*}ms")
	IFS=: read -ra o <<<"${spec#*:}"
	[ "$spec" = "${spec%%:*}" ] && o=()
	for kv in "${o[@]}"; do args+=("-${kv%%=*}" "${kv#*=}"); done
	ip netns add "$NS"
	"$B/run/delaylink" "${args[@]}" -a "awl$$a" -b "awl$$b" >"$B/run/delaylink.log" 2>&1 &
	pids+=($!)
	wait_for 5 grep -q ready "$B/run/delaylink.log"
	ip link set "awl$$b" netns "$NS"
	ip addr add 10.231.0.1/30 dev "awl$$a" && ip link set "awl$$a" up
	ip -n "$NS" addr add 10.231.0.2/30 dev "awl$$b" && ip -n "$NS" link set "awl$$b" up && ip -n "$NS" link set lo up

	PORT=10200
	# nsenter itself, not the function: it becomes awcp-fs, whose pid $! is
	nsenter --net="/run/netns/$NS" "$BIN/awcp-fs" serve --state-dir "$B/exec" --work-root "$B/work" --listen "10.231.0.2:$PORT" --plain-http \
		--sandbox-allow "$B/run" --max-ttl 2h --agent-cmd "bash '$B/run/work.sh' 2>&1" >"$B/run/awcp-fs.log" 2>&1 &
	pids+=($!)
	"$BIN/awcp-ctl" --state-dir "$B/ctl" serve >"$B/run/awcp-ctl.log" 2>&1 &
	pids+=($!)
	wait_for 10 test -S "$B/ctl/ctl.sock" || { echo "bench latency: awcp-ctl serve did not start" >&2; cat "$B/run/awcp-ctl.log" >&2; exit 1; }
	wait_for 10 grep -q listening "$B/run/awcp-fs.log" || { echo "bench latency: awcp-fs serve did not start" >&2; cat "$B/run/awcp-fs.log" >&2; exit 1; }

	case " $TARGETS " in *" sshfs "*) start_sshfs ;; esac
}

# link_mb_s: what the link carries, the best of three sends of 64 MiB
# over one TCP connection from this machine to the namespace (the
# direction of a read on the mount): one send varied by a fifth.
link_mb_s() {
	local best=0 v
	for _ in 1 2 3; do
		v=$(link_send)
		best=$(awk -v a="$best" -v b="$v" 'BEGIN { print (b > a) ? b : a }')
	done
	echo "$best"
}
link_send() {
	in_ns python3 - <<'PY' &
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.231.0.2", 2223)); s.listen(1)
c, _ = s.accept(); n = 0; t0 = time.monotonic()
while True:
    b = c.recv(1 << 20)
    if not b: break
    n += len(b)
print("%.1f" % (n / (time.monotonic() - t0) / 1e6), file=open("/tmp/awcp-link-mbs", "w"))
PY
	local srv=$!
	sleep 0.5
	python3 -c 'import socket; s = socket.create_connection(("10.231.0.2", 2223)); s.sendall(b"\0" * (64 << 20)); s.close()'
	wait "$srv"
	cat /tmp/awcp-link-mbs && rm -f /tmp/awcp-link-mbs
}

start_sshfs() {
	[ -f "$B/ssh/host" ] || {
		ssh-keygen -q -t ed25519 -N '' -f "$B/ssh/host"
		ssh-keygen -q -t ed25519 -N '' -f "$B/ssh/client"
		cp "$B/ssh/client.pub" "$B/ssh/authorized_keys" && chmod 600 "$B/ssh/authorized_keys"
	}
	cat >"$B/ssh/sshd_config" <<EOF
Port 2222
ListenAddress 10.231.0.1
HostKey $B/ssh/host
PidFile $B/ssh/sshd.pid
AuthorizedKeysFile $B/ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
StrictModes no
UseDNS no
Subsystem sftp internal-sftp
EOF
	mkdir -p /run/sshd
	/usr/sbin/sshd -f "$B/ssh/sshd_config" -E "$B/ssh/sshd.log"
	wait_for 5 test -s "$B/ssh/sshd.pid" || { echo "bench latency: OpenSSH did not start:" >&2; cat "$B/ssh/sshd.log" >&2; exit 1; }
	in_ns sshfs -o IdentityFile="$B/ssh/client",IdentitiesOnly=yes,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,BatchMode=yes,Port=2222 \
		"root@10.231.0.1:$B/lent" "$B/sshfs"
	wait_for 10 grep -q " $B/sshfs " /proc/self/mountinfo || { echo "bench latency: sshfs did not mount" >&2; exit 1; }
}

fresh() { rm -rf "$B/lent/p"; mkdir -p "$B/lent"; cp -a "$T" "$B/lent/p"; }
declare -A R
run_target() { # TARGET → LAT lines
	fresh
	case $1 in
	local) (cd "$B/lent/p" && bash "$B/run/work.sh") ;;
	sshfs) (cd "$B/sshfs/p" && LAT_TIMEOUT=$CAP bash "$B/run/work.sh") ;;
	live | git)
		# The delegation's two ends: from export to the agent's start,
		# and from the agent's end to export's return (all on this
		# machine's clock).
		local id sent back
		sent=$(date +%s.%N)
		"$BIN/awcp-ctl" --state-dir "$B/ctl" export "$B/lent/p" --peer "http://10.231.0.2:$PORT" --plain-http \
			--transport "$1" --ttl 1h --prompt "work" >"$B/run/export.out" 2>&1 &&
			back=$(date +%s.%N) &&
			id=$(sed -n 's/^delegation \([^ ]*\) .*/\1/p' "$B/run/export.out" | head -n 1) &&
			"$BIN/awcp-ctl" --state-dir "$B/ctl" logs "$id" 2>&1 | sed -n 's/.*LAT /LAT /p' |
			awk -v sent="$sent" -v back="$back" '{ print } /^LAT began_at=/ { split($2, a, "="); printf "LAT start=%.3f\n", a[2] - sent }
				/^LAT ended_at=/ { split($2, a, "="); printf "LAT end=%.3f\n", back - a[2] }' || {
			cat "$B/run/export.out" >&2
			echo "bench latency: the $1 delegation failed" >&2
			exit 1
		} ;;
	esac
}

WORKLOADS="status_cold status_warm grep_cold grep_warm create untar cat64 cc50"
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2 }'; }
printf 'rtt_ms\ttarget\tworkload\tseconds\n' >"$OUT/latency.tsv"
for rtt in $RTTS; do
	start_link "$rtt"
	LINK=$(link_mb_s)
	echo "bench latency: ${rtt} (ms round trip, and what else the link does; it carries $LINK MB/s), $ROUNDS round(s) of $TARGETS"
	printf '%s\tlink\tmb_s\t%s\n' "$rtt" "$LINK" >>"$OUT/latency.tsv"
	for r in $(seq "$ROUNDS"); do
		for t in $TARGETS; do
			s=$(date +%s)
			lines=$(run_target "$t") || exit 1
			for w in $WORKLOADS start end; do
				v=$(echo "$lines" | sed -n "s/^LAT $w=//p" | tail -n 1)
				v=${v%% *}
				R[$rtt.$t.$w.$r]=${v:-$CAP}
			done
			echo "bench latency:   round $r $t $(($(date +%s) - s)) s"
		done
	done
	printf '\n%-12s' "at ${rtt}"
	for t in $TARGETS; do printf ' %9s' "$t"; done
	printf '\n'
	for w in $WORKLOADS; do
		printf '%-12s' "$w"
		for t in $TARGETS; do
			v=(); for r in $(seq "$ROUNDS"); do v+=("${R[$rtt.$t.$w.$r]}"); done
			m=$(median "${v[@]}")
			printf ' %9.3f' "$m"
			printf '%s\t%s\t%s\t%s\n' "$rtt" "$t" "$w" "$m" >>"$OUT/latency.tsv"
		done
		printf '\n'
	done
	for t in $TARGETS; do
		case $t in live | git) ;; *) continue ;; esac
		for w in start end; do
			v=(); for r in $(seq "$ROUNDS"); do v+=("${R[$rtt.$t.$w.$r]}"); done
			m=$(median "${v[@]}")
			printf '%s\t%s\t%s\t%s\n' "$rtt" "$t" "$w" "$m" >>"$OUT/latency.tsv"
			eval "ends_$w=\$m"
		done
		printf '%-12s %s: export to the agent'"'"'s start %.3f s, the agent'"'"'s end to export'"'"'s return %.3f s\n' "ends" "$t" "$ends_start" "$ends_end"
	done
	for t in $TARGETS; do
		v=(); for r in $(seq "$ROUNDS"); do v+=("${R[$rtt.$t.cat64.$r]}"); done
		m=$(median "${v[@]}")
		printf '%-12s %s: %.0f MB/s, %.0f%% of the link\n' "cat64" "$t" "$(awk -v s="$m" 'BEGIN { print 67.108864 / s }')" \
			"$(awk -v s="$m" -v l="$LINK" 'BEGIN { print 100 * 67.108864 / s / l }')"
	done
	for l in awcp-fs awcp-ctl; do cp "$B/run/$l.log" "$OUT/latency-${rtt//[:=]/-}-$l.log"; done
	stop_all
done
echo "(seconds, medians; sshfs cut off at ${CAP} s. Goals at 20 ms: live status_cold ≤ 2, status_warm ≤ 0.1, grep_warm ≤ 0.3,"
echo " create ≤ 1, untar ≤ 1.5, cat64 ≥ 80% of the link, cc50 ≤ 1.5× local; git ≤ max(2× local, local + 0.1) each)"
