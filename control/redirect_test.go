package control

import (
	"errors"
	"net/http"
	"testing"
)

// A redirect is followed only to the very server the request was sent to:
// not to another port, host or scheme (an https peer's http:// twin).
func TestSameServerRedirects(t *testing.T) {
	req := func(u string) *http.Request { r, _ := http.NewRequest("POST", u, nil); return r }
	first := req("https://agent.example:8443/a2a")
	for _, tc := range []struct {
		next string
		ok   bool
	}{
		{"https://agent.example:8443/v2/a2a", true},
		{"https://AGENT.example:8443/a2a", true},
		{"http://agent.example:8443/a2a", false},
		{"https://agent.example:9443/a2a", false},
		{"https://agent.example/a2a", false},
		{"https://evil.example:8443/a2a", false},
		{"https://agent.example.evil.example:8443/a2a", false},
	} {
		err := SameServerRedirects(req(tc.next), []*http.Request{first})
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrRedirectRefused)) {
			t.Errorf("redirect to %s: %v", tc.next, err)
		}
	}
	via := []*http.Request{first, first, first, first, first}
	if err := SameServerRedirects(req("https://agent.example:8443/a2a"), via); err == nil {
		t.Errorf("a sixth redirect on the same server was followed")
	}
}
