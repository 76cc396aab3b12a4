package control

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/awcp/awcp/archive"
)

func TestDivert(t *testing.T) {
	path := [][]string{{"workDir", "transportHandle"}, {"workspaceBase64"}}
	cases := []struct {
		name, in, rest, diverted string
		found                    bool
	}{
		{"nested", `{"a":1,"workDir":{"transport":"archive","workspaceBase64":"QUJD","checksum":"x"}}`,
			`{"a":1,"workDir":{"transport":"archive","workspaceBase64":"","checksum":"x"}}`, "QUJD", true},
		{"escapes and space", "{ \"workDir\" : { \"workspaceBase64\" : \"QU\\/J\\u0044\" } }\n",
			"{ \"workDir\" : { \"workspaceBase64\" : \"\" } }", "QU/JD", true},
		{"same key elsewhere is kept", `{"workspaceBase64":"a","x":[{"workDir":{"workspaceBase64":"b"}}],"workDir":{"workspaceBase64":"c"}}`,
			`{"workspaceBase64":"a","x":[{"workDir":{"workspaceBase64":"b"}}],"workDir":{"workspaceBase64":""}}`, "c", true},
		{"absent", `{"type":"INVITE","prompt":"say \"hi\" \\ bye","n":[1,true,null,-2.5e3]}`,
			`{"type":"INVITE","prompt":"say \"hi\" \\ bye","n":[1,true,null,-2.5e3]}`, "", false},
		{"head dialect's member", `{"transportHandle":{"transport":"archive","workspaceBase64":"QUJD"}}`,
			`{"transportHandle":{"transport":"archive","workspaceBase64":""}}`, "QUJD", true},
		{"not a string is kept", `{"workDir":{"workspaceBase64":42}}`, `{"workDir":{"workspaceBase64":42}}`, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got bytes.Buffer
			// One byte at a time: every chunk boundary is exercised.
			r := bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(c.in)), 16)
			found := false
			rest, err := Divert(r, path, 1<<20, func() (io.Writer, error) { found = true; return &got, nil })
			if err != nil {
				t.Fatal(err)
			}
			if string(rest) != c.rest || found != c.found || got.String() != c.diverted {
				t.Fatalf("rest %s found %v diverted %q\nwant rest %s found %v diverted %q", rest, found, got.String(), c.rest, c.found, c.diverted)
			}
		})
	}
	for _, bad := range []string{`{"a" 1}`, `{"a":1 "b":2}`, `{"workDir":{"workspaceBase64":"a\qb"}}`, strings.Repeat("[", 100) + strings.Repeat("]", 100), `{"a":"` + strings.Repeat("x", 200) + `"}`} {
		_, err := Divert(bufio.NewReader(strings.NewReader(bad)), path, 100, func() (io.Writer, error) { return io.Discard, nil })
		var se *JSONSyntaxError
		if !errors.As(err, &se) {
			t.Errorf("%.40s: err %v, want a syntax error", bad, err)
		}
	}
	if _, err := Divert(bufio.NewReader(strings.NewReader(`{"a":`)), path, 100, nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut short: %v", err)
	}

	// Through an array ("[]"): an A2A message's file part, the first only.
	parts := [][]string{{"params"}, {"message"}, {"parts"}, {"[]"}, {"file"}, {"bytes"}}
	in := `{"params":{"message":{"parts":[{"kind":"text","text":"go"},{"kind":"file","file":{"bytes":"QUJD"}},{"kind":"file","file":{"bytes":"RA=="}}]}},"bytes":"x"}`
	var got bytes.Buffer
	rest, err := Divert(bufio.NewReader(strings.NewReader(in)), parts, 1<<20, func() (io.Writer, error) { return &got, nil })
	want := `{"params":{"message":{"parts":[{"kind":"text","text":"go"},{"kind":"file","file":{"bytes":""}},{"kind":"file","file":{"bytes":"RA=="}}]}},"bytes":"x"}`
	if err != nil || string(rest) != want || got.String() != "QUJD" {
		t.Errorf("through an array: %s %q %v", rest, got.String(), err)
	}
}

func TestBase64Streams(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 4, 48 << 10, 48<<10 + 1, 300_001} {
		data := make([]byte, n)
		rand.Read(data)
		enc, err := io.ReadAll(iotest.HalfReader(NewBase64Reader(bytes.NewReader(data))))
		if err != nil || string(enc) != base64.StdEncoding.EncodeToString(data) {
			t.Fatalf("%d bytes: encoding differs (%v)", n, err)
		}
		var dec bytes.Buffer
		w := &base64Writer{dst: &dec}
		for rest := enc; len(rest) > 0; { // in uneven pieces
			k := min(len(rest), 1+len(rest)%7919)
			if _, err := w.Write(rest[:k]); err != nil {
				t.Fatal(err)
			}
			rest = rest[k:]
		}
		if err := w.Close(); err != nil || !bytes.Equal(dec.Bytes(), data) {
			t.Fatalf("%d bytes: decoding differs (%v)", n, err)
		}
	}
	for _, bad := range []string{"QUJ", "QU!D"} {
		w := &base64Writer{dst: io.Discard}
		_, err := w.Write([]byte(bad))
		if err == nil {
			err = w.Close()
		}
		var be *base64Error
		if !errors.As(err, &be) {
			t.Errorf("%q: %v, want not base64", bad, err)
		}
	}
}

// A done event's result reaches fn as a file and never as a string, across
// CRLF line ends, comments, data split over lines and an id after the data.
func TestReadSSEDivertsTheResult(t *testing.T) {
	result := make([]byte, 1<<20)
	rand.Read(result)
	stream := ": keep-alive\r\n\r\n" +
		"data: {\"delegationId\":\"dlg_1\",\r\ndata: \"type\":\"status\",\"status\":\"running\"}\r\nid: 7\r\n\r\n" +
		"id: 8\ndata: {\"delegationId\":\"dlg_1\",\"type\":\"done\",\"summary\":\"ok\",\"resultBase64\":\"" +
		base64.StdEncoding.EncodeToString(result) + "\"}\n\n"
	spool := t.TempDir()
	var seqs []uint64
	var files []string
	err := ReadSSE(strings.NewReader(stream), spool, 0, func(seq uint64, data []byte, got Spooled) (bool, error) {
		file, bad := got.File, got.Bad
		seqs = append(seqs, seq)
		if len(data) > 1000 {
			t.Errorf("event %d kept %d bytes of data", seq, len(data))
		}
		if bad != nil {
			t.Errorf("event %d: %v", seq, bad)
		}
		if file != "" {
			files = append(files, file)
			if b, _ := os.ReadFile(file); !bytes.Equal(b, result) || got.Sum != archive.Checksum(result) {
				t.Errorf("the result file holds %d bytes (sum %s), not the result", len(b), got.Sum)
			}
		}
		return strings.Contains(string(data), `"done"`), nil
	})
	if err != nil || len(seqs) != 2 || seqs[0] != 7 || seqs[1] != 8 || len(files) != 1 {
		t.Fatalf("seqs %v files %v err %v", seqs, files, err)
	}
	if left, _ := os.ReadDir(spool); len(left) != 0 {
		t.Fatalf("spool files left: %v", left)
	}
	// A stream cut inside the result leaves nothing behind either.
	cut := stream[:len(stream)-1000]
	err = ReadSSE(strings.NewReader(cut), spool, 0, func(uint64, []byte, Spooled) (bool, error) { return false, nil })
	if !errors.Is(err, ErrStreamEnded) {
		t.Fatalf("cut stream: %v", err)
	}
	if left, _ := os.ReadDir(spool); len(left) != 0 {
		t.Fatalf("spool files left after a cut stream: %v", left)
	}
}

// DivertEach takes every matching string out, each to a writer of its
// own with its mark in rest, at any depth and through arrays; the rest
// reads as it was.
func TestDivertEach(t *testing.T) {
	in := `{"a":{"file":{"bytes":"b25l","name":"x"}},"list":[{"file":{"bytes":"dH\u0077by"}},{"file":{"bytes":7}},{"bytes":"kept"}],"file":"kept too"}`
	var got []*bytes.Buffer
	rest, err := DivertEach(bufio.NewReader(strings.NewReader(in)), 1<<10,
		func(keys []string) bool {
			return len(keys) >= 2 && keys[len(keys)-2] == "file" && keys[len(keys)-1] == "bytes"
		},
		func() (io.Writer, string, error) {
			got = append(got, new(bytes.Buffer))
			return got[len(got)-1], fmt.Sprint("mark-", len(got)), nil
		})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"a":{"file":{"bytes":"mark-1","name":"x"}},"list":[{"file":{"bytes":"mark-2"}},{"file":{"bytes":7}},{"bytes":"kept"}],"file":"kept too"}`
	if string(rest) != want || len(got) != 2 || got[0].String() != "b25l" || got[1].String() != "dHwby" {
		t.Errorf("rest %s, diverted %q", rest, got)
	}
	if _, err := DivertEach(bufio.NewReader(strings.NewReader(`{"x":"`+strings.Repeat("y", 2000)+`"}`)), 1<<10,
		func([]string) bool { return false }, nil); !errors.Is(err, ErrRestTooLarge) {
		t.Errorf("a rest past its bound: %v", err)
	}
}
