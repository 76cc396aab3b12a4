package control

import (
	"strings"
	"testing"
)

func TestCallChain(t *testing.T) {
	chain, err := ParseCallChain(" a-1, b_2 ,,c.3")
	if err != nil || strings.Join(chain, ",") != "a-1,b_2,c.3" {
		t.Fatalf("ParseCallChain = %q, %v", chain, err)
	}
	for _, bad := range []string{"a b", "a,\x1b[2J", strings.Repeat("x", 65), strings.Repeat("a,", MaxCallChain+1)} {
		if _, err := ParseCallChain(bad); err == nil {
			t.Errorf("ParseCallChain(%q) accepted", bad)
		}
	}
	if got := ExtendCallChain([]string{"a", "b"}, "b"); strings.Join(got, ",") != "a,b" {
		t.Errorf("an agent delegating again from its own task appears once: %q", got)
	}
	orig := []string{"a"}
	if got := ExtendCallChain(orig, "b"); strings.Join(got, ",") != "a,b" || len(orig) != 1 {
		t.Errorf("ExtendCallChain = %q, original %q", got, orig)
	}
	// Circular: an agent already in the chain — but not the chain a
	// person begins at the agent itself (both programs on one machine),
	// which a delegator inside that agent's own delegation never sends.
	for _, tc := range []struct {
		inherited []string
		self      string
		chain     string
		circular  map[string]bool
	}{
		{nil, "a", "a", map[string]bool{"a": false, "b": false}},
		{[]string{"a"}, "a", "a,a", map[string]bool{"a": true}},
		{[]string{"a", "a"}, "a", "a,a", map[string]bool{"a": true}},
		{[]string{"x", "a"}, "a", "x,a", map[string]bool{"a": true, "x": true, "b": false}},
		{[]string{"a", "b"}, "b", "a,b", map[string]bool{"a": true, "b": true, "c": false}},
		{[]string{"a"}, "", "a", map[string]bool{"a": false}},
	} {
		chain := DelegatorCallChain(tc.inherited, tc.self)
		if strings.Join(chain, ",") != tc.chain {
			t.Errorf("DelegatorCallChain(%q, %q) = %q, want %q", tc.inherited, tc.self, chain, tc.chain)
		}
		for exec, want := range tc.circular {
			if got := IsCircular(chain, exec); got != want {
				t.Errorf("IsCircular(%q, %q) = %v, want %v", chain, exec, got, want)
			}
		}
	}
	pe := CircularCall("b", []string{"a", "b"})
	m := pe.ToMessage("d1")
	if m.Code != CodeDeclined || m.Reason != ReasonCircularCall || strings.Join(m.CallChain, ",") != "a,b" {
		t.Fatalf("the refusal on the wire: %+v", m)
	}
	if back := m.ProtocolError(); back.Reason != ReasonCircularCall || len(back.CallChain) != 2 {
		t.Fatalf("read back: %+v", back)
	}
}
