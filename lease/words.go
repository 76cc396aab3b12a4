package lease

import (
	"regexp"
	"strings"
)

// TellingLine is the line of an agent's stderr that says most: the first
// that names an error (a warning is not one), else the last that is not
// empty; "" for none.
func TellingLine(stderr string) string {
	stderr = strings.TrimSpace(stderr)
	if stderr == "" {
		return ""
	}
	lines := strings.Split(stderr, "\n")
	for _, l := range lines {
		if errorLine.MatchString(l) && !warningLine.MatchString(l) {
			return strings.TrimSpace(l)
		}
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return ""
}

var (
	errorLine   = regexp.MustCompile(`(?i)error|denied|cannot|not found|no such|not logged in|missing|required`)
	warningLine = regexp.MustCompile(`(?i)^\s*(warn(ing)?\b|\[warn)`)
)
