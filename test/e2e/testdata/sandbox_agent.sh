#!/bin/sh
# The agent of e2e.TestAgentSandbox. Its prompt says what it is:
#   hold ALLOW_RW          stays running (its environment holds a secret
#                          of its own) until release appears in its dir
#   probe DAEMON_PID STATE WORKROOT FIRST_ID FIRST_PID ALLOW_RO ALLOW_RW HOME
#         PORT TOKEN MARKER
#                          tries what it must not reach and does its own
#                          work, one "ok"/"refused" line each, into
#                          probes.txt in its work dir.
set -u
set -- $AWCP_PROMPT
: "${TMPDIR:=$(mktemp -d)}"
export TMPDIR
case "$1" in
hold)
	echo "$AWCP_DELEGATION_ID" > "$2/first.id"
	i=0
	while [ ! -e release ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
	exit 0
	;;
esac
daemon=$2 state=$3 root=$4 first=$5 firstpid=$6 ro=$7 rw=$8 home=$9
shift 9
port=$1 token=$2 marker=$3
try() { if "$@" >/dev/null 2>&1; then echo "ok: $*"; else echo "refused: $*"; fi; }
{
	# What it must not reach.
	try cat "$root/$first/notes.txt"
	try sh -c "echo intruder >> '$root/$first/notes.txt'"
	try sh -c "ls '$root' | grep -q '$first'"
	try sh -c "ls '$state' | grep -q executor.db"
	try cat "$state/executor.db"
	try ls /root
	try cat /proc/$firstpid/environ
	try grep -q sandbox-token /proc/$daemon/cmdline
	try sh -c 'echo x > /etc/awcp-sandbox-probe'
	try sh -c "echo x > '$home/awcp-sandbox-probe'"
	try ln -s "$state" "$TMPDIR/escape"
	try cat "$TMPDIR/escape/executor.db"
	try kill -0 "$daemon"
	try cat "$ro/granted.txt"
	try sh -c "echo x > '$ro/written.txt'"
	try sh -c "echo x > '$rw/written.txt'"
	# What Landlock alone does not fence: a pathname socket, the host's
	# shared places, the other mounts, what root may read.
	try nc -U -z "/run/$marker.sock"
	try ls "/tmp/$marker" "/dev/shm/$marker"
	try grep -q "$first" /proc/self/mountinfo
	try cat /etc/shadow
	# The executor's API, about the first delegation, with the token (as
	# if it had leaked): without a certificate and with one of its own.
	openssl req -x509 -newkey ed25519 -nodes -subj /CN=agent -days 1 -keyout "$TMPDIR/k" -out "$TMPDIR/c" >/dev/null 2>&1
	api() { # METHOD PATH [client certificate options]
		m=$1 p=$2
		shift 2
		printf '%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n' "$m" "$p" "$token" |
			timeout 10 openssl s_client -quiet -connect "127.0.0.1:$port" "$@" 2>/dev/null
	}
	for cert in none own; do
		set --
		[ $cert = own ] && set -- -cert "$TMPDIR/c" -key "$TMPDIR/k"
		api GET /awcp/status "$@" > "$TMPDIR/status"
		echo "api $cert: GET /awcp/status: $(head -c 12 "$TMPDIR/status" | tail -c 3), first listed: $(grep -c "$first" "$TMPDIR/status")"
		echo "api $cert: GET events: $(api GET "/awcp/tasks/$first/events" "$@" | head -c 12 | tail -c 3)"
		echo "api $cert: POST cancel: $(api POST "/awcp/cancel/$first" "$@" | head -c 12 | tail -c 3)"
	done
	try sh -c 'test "$(id -un)" = awcp-agent'
	# Its own work.
	try sh -c 'echo mine > own.txt'
	try sh -c 'echo tmp > "$TMPDIR/t" && cat "$TMPDIR/t"'
	export HOME="$TMPDIR" GOPATH="$TMPDIR/gopath" GOTOOLCHAIN=local GOENV=off GOFLAGS=
	# git in a repository of its own (in the mount a new repository's
	# config is the owner's git's to obey: refused, SECURITY.md).
	try sh -c 'git init -q "$TMPDIR/repo" && cd "$TMPDIR/repo" && echo a > a && git add a && git -c user.name=a -c user.email=a@b commit -qm a'
	try sh -c 'mkdir -p hello && cd hello && printf "module hello\ngo 1.21\n" > go.mod && printf "package main\nfunc main() { println(\"built\") }\n" > main.go && go build -o hello . && ./hello'
} > probes.txt 2>&1
echo probed
