package untrusted

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrAmbiguousJSON is JSONKeys's error: the message means different things
// to different parsers.
var ErrAmbiguousJSON = errors.New("ambiguous JSON")

// maxDepth bounds how deep JSONKeys follows nested values: a message of a
// million '[' costs no more than its length.
const maxDepth = 256

// JSONKeys checks that data is one JSON value in which no object holds a
// key twice, nor two keys equal under case folding (`path` and `PATH`, or
// `K` and the Kelvin sign that Go's decoder takes for it), escapes decoded
// (`p\u0061th` is `path`). Such a message is read one way by the code that
// checks it and another by the program it reaches, so it is refused
// whole, not repaired.
func JSONKeys(data []byte) error {
	_, err := scanJSON(data, nil)
	return err
}

// CheckJSONObject is JSONKeys for a JSON object whose own keys must each
// be one of allowed, exactly as spelt: a member the checker does not know
// is not passed on for a reader that may know it. One pass over data.
func CheckJSONObject(data []byte, allowed ...string) error {
	top, err := scanJSON(data, allowed)
	if err == nil && !top {
		err = errors.New("not a JSON object")
	}
	return err
}

// ExactObject is CheckJSONObject, and the object decoded into a map.
func ExactObject(data []byte, allowed ...string) (map[string]json.RawMessage, error) {
	if err := CheckJSONObject(data, allowed...); err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		return nil, errors.New("not a JSON object")
	}
	return m, nil
}

// Fold is s folded for comparison without case, as encoding/json matches
// a key to a field: `K` (U+212A) and `ſ` (U+017F) fold with k and s.
func Fold(s string) string { return strings.ToLower(strings.ToUpper(s)) }

// scanner walks JSON bytes without building values: only object keys are
// decoded, to be compared. What is not JSON is an error, though the
// callers have decoded the message already.
type scanner struct {
	b       []byte
	i       int
	allowed []string // the top object's keys, where checked
}

// scanJSON checks data; top reports whether its value is an object.
func scanJSON(data []byte, allowed []string) (top bool, err error) {
	s := &scanner{b: data, allowed: allowed}
	s.ws()
	top = s.i < len(s.b) && s.b[s.i] == '{'
	if err := s.value(0); err != nil {
		return top, err
	}
	s.ws()
	if s.i != len(s.b) {
		return top, fmt.Errorf("%w: more than one value", ErrAmbiguousJSON)
	}
	return top, nil
}

var errNotJSON = errors.New("not JSON")

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) value(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: nested deeper than %d", ErrAmbiguousJSON, maxDepth)
	}
	s.ws()
	if s.i >= len(s.b) {
		return errNotJSON
	}
	switch s.b[s.i] {
	case '{':
		return s.object(depth)
	case '[':
		s.i++
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
			return nil
		}
		for {
			if err := s.value(depth + 1); err != nil {
				return err
			}
			if done, err := s.next(']'); done || err != nil {
				return err
			}
		}
	case '"':
		_, err := s.str(false)
		return err
	}
	for s.i < len(s.b) { // a number, true, false or null
		switch s.b[s.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return nil
		}
		s.i++
	}
	return nil
}

func (s *scanner) object(depth int) error {
	s.i++ // '{'
	seen := map[string]string{}
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return errNotJSON
		}
		key, err := s.str(true)
		if err != nil {
			return err
		}
		if depth == 0 && s.allowed != nil {
			ok := false
			for _, a := range s.allowed {
				ok = ok || key == a
			}
			if !ok {
				return fmt.Errorf("unknown field %q (known: %s)", key, strings.Join(s.allowed, ", "))
			}
		}
		folded := Fold(key)
		if prev, dup := seen[folded]; dup {
			if prev == key {
				return fmt.Errorf("%w: key %q twice in one object", ErrAmbiguousJSON, key)
			}
			return fmt.Errorf("%w: keys %q and %q differ only in case", ErrAmbiguousJSON, prev, key)
		}
		seen[folded] = key
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return errNotJSON
		}
		s.i++
		if err := s.value(depth + 1); err != nil {
			return err
		}
		if done, err := s.next('}'); done || err != nil {
			return err
		}
	}
}

// next reads what follows a member or an element: a comma (more to come)
// or closer (done).
func (s *scanner) next(closer byte) (done bool, err error) {
	s.ws()
	if s.i >= len(s.b) {
		return false, errNotJSON
	}
	c := s.b[s.i]
	s.i++
	switch c {
	case closer:
		return true, nil
	case ',':
		return false, nil
	}
	return false, errNotJSON
}

// str reads a string at s.i; decoded (escapes resolved) where want.
func (s *scanner) str(want bool) (string, error) {
	start := s.i
	s.i++ // '"'
	escaped := false
	for s.i < len(s.b) {
		// The next quote or backslash, found by the library's fast scan:
		// a string of megabytes (a file's content) is most of a message.
		j := bytes.IndexAny(s.b[s.i:], "\"\\")
		if j < 0 {
			return "", errNotJSON
		}
		s.i += j
		switch s.b[s.i] {
		case '\\':
			escaped = true
			s.i += 2
			continue
		case '"':
			s.i++
			if !want {
				return "", nil
			}
			raw := s.b[start:s.i]
			if !escaped {
				return string(raw[1 : len(raw)-1]), nil
			}
			var out string
			if err := json.Unmarshal(raw, &out); err != nil {
				return "", errNotJSON
			}
			return out, nil
		}
		s.i++
	}
	return "", errNotJSON
}
