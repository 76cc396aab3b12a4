package untrusted

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Name is s as a terminal may show it: a name or text that came from
// the other machine (an executor's file names, its agent's words) with a
// control character, a backslash, bytes that are not UTF-8 or a format
// character (a bidirectional override that makes a name read backwards, a
// zero-width space that makes two names look one) is quoted with Go's
// escapes, as `ls -b` and git quote such names, so that it can neither
// forge a line of our output, move the terminal's cursor, nor read as
// another name.
func Name(s string) string {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '\\' || r == utf8.RuneError || (r >= 0x80 && r < 0xa0) || r == '\u2028' || r == '\u2029' ||
			unicode.Is(unicode.Cf, r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// bidiControl reports whether r is one of Unicode's bidirectional
// controls (UAX #9): embeddings, overrides, isolates and marks, which
// make the text after them read in another order than it is.
func bidiControl(r rune) bool {
	return r == '\u061c' || r == '\u200e' || r == '\u200f' || (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069')
}

// Text is Name for text of several lines (an agent's summary
// or progress): newlines and tabs stay; every other control character,
// and every bidirectional control, is shown escaped (ESC as \x1b, U+202E
// as \u202e), so no escape sequence reaches the terminal and no line
// reads backwards. (Other format characters stay: a zero-width joiner is
// part of an emoji in prose.)
func Text(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError || bidiControl(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Line is s as one line of prose bound for another reader than a
// terminal — a file an agent reads (a skill), a quoted YAML or Markdown
// line: every run of control characters, line or paragraph separators and
// white space is one space; format characters (bidirectional overrides,
// zero-width joiners and spaces, which make text read otherwise than it
// is) and bytes that are not UTF-8 are dropped; the rest is cut at max
// bytes, on a character's edge. What it returns cannot start a line of
// its own wherever it is put.
func Line(s string, max int) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		switch {
		case r == utf8.RuneError || unicode.Is(unicode.Cf, r):
			continue
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || unicode.IsSpace(r) || r == '\u2028' || r == '\u2029':
			space = true
			continue
		}
		sep := space && b.Len() > 0
		space = false
		if n := b.Len() + utf8.RuneLen(r); n > max || sep && n+1 > max {
			break
		}
		if sep {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Clip is s cut to at most max bytes on a character's edge, with "…" if
// anything was cut: words of the other side kept in a record or a
// message, bounded, without a broken character at the end.
func Clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max] + "…"
}
