# table.awk: the fs bench table from four workloads.sh result files, in the
# order local, goloop, sshfs, awcp. Prints the table with the ratios and the
# issue's targets, and writes it as TSV to the file in -v tsv.
# Also -v mode (cold or warm), tick, rounds, ctl_cpu, exec_cpu (clock ticks), ctl_rss, exec_rss (KiB),
# and goals (goals.tsv, read by goals.awk, which is loaded with it).
BEGIN { split("local goloop sshfs awcp", label, " ") }
FNR == 1 { f++ }
/^# workloads / { for (i = 2; i <= NF; i++) if ($i ~ /^seq_mb=/) seq_mb = substr($i, 8) + 0 }
/^#/ || NF < 2 { next }
{
	if (!(($1) in seen)) { seen[$1] = 1; order[++n] = $1 }
	val[f, $1] = $2
}
function num(x) { return x ~ /^[0-9.]+$/ ? x + 0 : -1 }
# slower(a, b): how many times slower a is than b (higher is worse)
function slower(w, a, b) {
	if (a <= 0 || b <= 0) return -1
	return (w ~ /_iops$/) ? b / a : a / b
}
function fmt(x) { return x < 0 ? "-" : sprintf("%.2f", x) }
END {
	hdr = "workload\tlocal\tgoloop\tsshfs\tawcp\tawcp_vs_local\tawcp_vs_goloop\tspeedup_vs_sshfs\ttarget"
	print hdr > tsv
	printf "\n%-26s %9s %9s %9s %9s  %8s %8s %9s  %s\n", "workload", "local", "goloop", "sshfs", "awcp",
		"x local", "x goloop", "vs sshfs", "target"
	misses = 0
	for (i = 1; i <= n; i++) {
		w = order[i]
		l = num(val[1, w]); g = num(val[2, w]); s = num(val[3, w]); a = num(val[4, w])
		xl = slower(w, a, l); xg = slower(w, a, g); sp = slower(w, s, a)
		target = ""
		latency = w ~ /_ms$/ # not a workload: how long a change made on the source side takes to show through the mount
		if (!latency) {
			g = goal(w, mode, "vs_sshfs")
			if (sp < 0) target = "no result"
			else if (meets(sp, g)) target = sprintf("ok (%sx)", g)
			else { target = sprintf("MISSED: %.2fx, want %sx", sp, g); misses++ }
			g = goal(w, mode, "x_loopback")
			if (xg >= 0) {
				if (meets(xg, g)) target = target sprintf(", ok (%sx goloop)", g)
				else { target = target sprintf(", MISSED: %.2fx goloop, want %sx", xg, g); misses++ }
			}
		}
		if ((g = goal(w, mode, "value")) != "") {
			sep = (target == "") ? "" : ", "
			if (a < 0) target = target sep "no result"
			else if (meets(a, g)) target = target sep sprintf("ok (%s)", g)
			else { target = target sep sprintf("MISSED: %g, want %s", a, g); misses++ }
		}
		unit = (w ~ /_iops$/) ? "(iops)" : (w ~ /_ms$/) ? "" : "(s)"
		if (latency) xl = xg = sp = -1 # a latency, not a workload: no ratios
		printf "%-26s %9s %9s %9s %9s  %8s %8s %8sx  %s\n", w " " unit, val[1, w], val[2, w], val[3, w], val[4, w],
			fmt(xl), fmt(xg), fmt(sp), target
		printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", w, val[1, w], val[2, w], val[3, w], val[4, w],
			fmt(xl), fmt(xg), fmt(sp), target > tsv
	}
	# The sequential workloads as throughput, which is how a large file's
	# speed is usually told.
	for (i = 1; i <= n && seq_mb > 0; i++) {
		w = order[i]
		if (w != "seq_read" && w != "seq_write") continue
		printf "\n%-26s", w " (MB/s)"
		line = "mb_s\t" w
		for (k = 1; k <= 4; k++) {
			t = num(val[k, w])
			v = (t > 0) ? sprintf("%.0f", seq_mb * 1.048576 / t) : "-"
			printf " %9s", v
			line = line "\t" v
		}
		print line > tsv
	}
	printf "\n"
	printf "\nx local / x goloop: awcp's slowdown against them (higher is worse); vs sshfs: awcp's speed-up (higher is better).\n"
	printf "medians of %d interleaved round(s); targets missed: %d\n", rounds, misses
	printf "awcp cost over the awcp runs: delegator (awcp-ctl serve: SSH/SFTP server) %.1f s CPU, peak RSS %.1f MiB;",
		ctl_cpu / tick, ctl_rss / 1024
	printf " executor (awcp-fs: FUSE client) %.1f s CPU, peak RSS %.1f MiB\n", exec_cpu / tick, exec_rss / 1024
	printf "cost\tdelegator_cpu_s\t%.1f\tdelegator_peak_rss_mib\t%.1f\texecutor_cpu_s\t%.1f\texecutor_peak_rss_mib\t%.1f\n",
		ctl_cpu / tick, ctl_rss / 1024, exec_cpu / tick, exec_rss / 1024 > tsv
	print "TSV: " tsv
}
