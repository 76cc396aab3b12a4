package lease

import "testing"

// TellingLine picks an agent's own words out of its stderr: the first
// line naming an error, not a warning; else its last line.
func TestTellingLine(t *testing.T) {
	for in, want := range map[string]string{
		"":                                   "",
		"\n  \n":                             "",
		"starting\nError: no API key\nbye\n": "Error: no API key",
		"WARNING: cannot create PATH aliases\nReading input...\nNot inside a trusted directory\n": "Not inside a trusted directory",
		"Not logged in · Please run /login\n":                                                     "Not logged in · Please run /login",
		"a\nb\n\n":                                                                                "b",
	} {
		if got := TellingLine(in); got != want {
			t.Errorf("TellingLine(%q) = %q, want %q", in, got, want)
		}
	}
}
