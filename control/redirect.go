package control

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/awcp/awcp/internal/untrusted"
)

// ErrRedirectRefused is what a delegator's request ends with when a peer
// answered it with a redirect to another server.
var ErrRedirectRefused = errors.New("redirect to another server refused")

// maxRedirects is how many redirects on the same server a request follows.
const maxRedirects = 5

// SameServerRedirects is the CheckRedirect of every HTTP client of the
// delegator (executors, A2A agents and their cards, manifests found by
// discovery): a redirect is followed only to the scheme, host and port
// the request was first sent to. The token and the workspace a request
// carries were meant for that server alone — its round tripper adds the
// token on every hop — and an https one must not be sent on in clear.
func SameServerRedirects(next *http.Request, via []*http.Request) error {
	if len(via) == 0 {
		return nil
	}
	first := via[0].URL
	if next.URL.Scheme != first.Scheme || !strings.EqualFold(next.URL.Host, first.Host) {
		return fmt.Errorf("%w: %s answered with a redirect to %s; nothing was sent there",
			ErrRedirectRefused, first.Scheme+"://"+first.Host, untrusted.Clip(next.URL.Scheme+"://"+next.URL.Host, 200))
	}
	if len(via) >= maxRedirects {
		return fmt.Errorf("%s redirected %d times", first.Scheme+"://"+first.Host, len(via))
	}
	return nil
}

// WithSameServerRedirects is a copy of c (nil: a new client) that follows
// redirects only as SameServerRedirects allows.
func WithSameServerRedirects(c *http.Client) *http.Client {
	if c == nil {
		return &http.Client{CheckRedirect: SameServerRedirects}
	}
	cc := *c
	cc.CheckRedirect = SameServerRedirects
	return &cc
}
