package control

import (
	"regexp"
	"strings"
)

// TellingLine is the line of an agent's stderr that says most: the first
// that names an error, else the last that is not empty; "" for none.
func TellingLine(stderr string) string {
	stderr = strings.TrimSpace(stderr)
	if stderr == "" {
		return ""
	}
	lines := strings.Split(stderr, "\n")
	for _, l := range lines {
		if errorLine.MatchString(l) {
			return strings.TrimSpace(l)
		}
	}
	return strings.TrimSpace(lines[len(lines)-1])
}

var errorLine = regexp.MustCompile(`(?i)error|denied|cannot|not found|no such`)
