package sshd

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/awcp/awcp/internal/metrics"
)

// The server counts each request by operation, the file data it moves,
// and the errors it answers with: what an operator's dashboard shows of a
// mount's traffic.
func TestSFTPMetrics(t *testing.T) {
	reg := metrics.New()
	f := newFixtureWith(t, reg)
	dir, cred := f.lend(t, "dlg_metrics", false)
	c := f.sftp(t, "dlg_metrics", cred)

	data := bytes.Repeat([]byte("x"), 100_000)
	w, err := c.Create("/big")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r, err := c.Open("/big")
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := got.ReadFrom(r); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := c.Stat("/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat of a missing file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "big")); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"awcp_sftp_bytes_total", map[string]string{"op": "write"}, 100_000},
		{"awcp_sftp_bytes_total", map[string]string{"op": "read"}, 100_000},
		{"awcp_sftp_errors_total", map[string]string{"status": "no_such_file"}, 1},
	} {
		if got := reg.Sum(tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	for _, op := range []string{"open", "write", "read", "close", "stat"} {
		if n := reg.Sum("awcp_sftp_request_seconds", map[string]string{"op": op}); n < 1 {
			t.Errorf("no %s request counted", op)
		}
	}
	if n := reg.Sum("awcp_sftp_request_seconds", map[string]string{"op": "other"}); n != 0 {
		t.Errorf("%v requests counted as other", n)
	}
}
