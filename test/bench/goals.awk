# goals.awk: the goals of test/bench/goals.tsv (-v goals=FILE), for
# table.awk and summary.sh. goal(metric, mode, kind) is "OP VALUE" (OP
# <= or >=), or "" where none is set; meets(v, g) tells whether v meets g;
# row(k, v, g) is a line of summary.tsv.
function goal(metric, mode, kind,   line, f) {
	if (!goals_read) {
		while ((getline line < goals) > 0) {
			if (line ~ /^#/ || line == "") continue
			split(line, f, "\t")
			G[f[1], f[2], f[3]] = f[4] " " f[5]
		}
		close(goals)
		goals_read = 1
	}
	if ((metric, mode, kind) in G) return G[metric, mode, kind]
	if ((metric, "*", kind) in G) return G[metric, "*", kind]
	if (("*", mode, kind) in G) return G["*", mode, kind]
	if (("*", "*", kind) in G) return G["*", "*", kind]
	return ""
}
function meets(v, g,   p) {
	split(g, p, " ")
	return (p[1] == "<=") ? v + 0 <= p[2] + 0 : v + 0 >= p[2] + 0
}
function row(k, v, g) { printf "%s\t%s\t%s\n", k, v, g }
