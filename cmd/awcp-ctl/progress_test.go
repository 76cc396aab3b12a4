package main

import "testing"

// A small transfer is shown in a unit that shows it, not as
// "0.0 MiB of 0.0 MiB" (issue 42.14).
func TestSizeShowsSmallTransfers(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 900: "900 B", 10 << 10: "10.0 KiB", 3 << 20: "3.0 MiB", 5 << 30: "5.00 GiB",
	} {
		if got := size(n); got != want {
			t.Errorf("size(%d) = %q, want %q", n, got, want)
		}
	}
}
