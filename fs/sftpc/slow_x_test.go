package sftpc_test

import "testing"

// slow marks a test that takes a second or more here: `make test-short`
// (go test -short), the loop while working, leaves it out; `make test`
// and CI run every test.
func slow(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a second or more: make test runs it")
	}
}
