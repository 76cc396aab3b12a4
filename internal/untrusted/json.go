package untrusted

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
// `K` and the Kelvin sign that Go's decoder takes for it). Such a message
// is read one way by the code that checks it and another by the program
// it reaches, so it is refused whole, not repaired.
func JSONKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := walkValue(dec, 0); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: more than one value", ErrAmbiguousJSON)
	}
	return nil
}

func walkValue(dec *json.Decoder, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: nested deeper than %d", ErrAmbiguousJSON, maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]string{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return fmt.Errorf("not JSON: %w", err)
			}
			key := kt.(string)
			folded := Fold(key)
			if prev, dup := seen[folded]; dup {
				if prev == key {
					return fmt.Errorf("%w: key %q twice in one object", ErrAmbiguousJSON, key)
				}
				return fmt.Errorf("%w: keys %q and %q differ only in case", ErrAmbiguousJSON, prev, key)
			}
			seen[folded] = key
			if err := walkValue(dec, depth+1); err != nil {
				return err
			}
		}
		_, err = dec.Token() // '}'
		return err
	case json.Delim('['):
		for dec.More() {
			if err := walkValue(dec, depth+1); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ']'
		return err
	}
	return nil
}

// Fold is s folded for comparison without case, as encoding/json matches
// a key to a field: `K` (U+212A) and `ſ` (U+017F) fold with k and s.
func Fold(s string) string { return strings.ToLower(strings.ToUpper(s)) }

// ExactObject decodes the JSON object data into a map, refusing any key
// not in allowed exactly as spelt (case included): a field the checker does
// not know is not passed on for a reader that may know it.
func ExactObject(data []byte, allowed ...string) (map[string]json.RawMessage, error) {
	if err := JSONKeys(data); err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	for k := range m {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			return nil, fmt.Errorf("unknown field %q (known: %s)", k, strings.Join(allowed, ", "))
		}
	}
	return m, nil
}
