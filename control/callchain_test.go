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
	pe := CircularCall("b", []string{"a", "b"})
	m := pe.ToMessage("d1")
	if m.Code != CodeDeclined || m.Reason != ReasonCircularCall || strings.Join(m.CallChain, ",") != "a,b" {
		t.Fatalf("the refusal on the wire: %+v", m)
	}
	if back := m.ProtocolError(); back.Reason != ReasonCircularCall || len(back.CallChain) != 2 {
		t.Fatalf("read back: %+v", back)
	}
}
