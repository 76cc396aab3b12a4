package httpserve

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// One port serves TLS, and plain HTTP only where allowed; clients that
// open a TLS handshake and stall, or send nothing, hold no goroutine of
// Accept and are cut at the header deadline, while others are served.
func TestTLSOrPlain(t *testing.T) {
	for _, plain := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, isTLS := PeerTLS(r)
			io.WriteString(w, map[bool]string{true: "tls", false: "plain"}[isTLS])
		}))
		srv.ReadHeaderTimeout = 500 * time.Millisecond
		srv.ConnContext = WithConn
		go srv.Serve(TLSOrPlain(ln, &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}, plain, []byte("HTTP/1.1 426 Upgrade Required\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")))
		addr := ln.Addr().String()

		// Stallers first: a handshake's first byte and nothing more, and
		// nothing at all.
		var stalled []net.Conn
		for i := range 20 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 {
				c.Write([]byte{0x16})
			}
			stalled = append(stalled, c)
		}
		tlsClient := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		resp, err := tlsClient.Get("https://" + addr + "/")
		if err != nil {
			t.Fatalf("plain=%v: a TLS client behind 20 stallers: %v", plain, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "tls" {
			t.Errorf("plain=%v: the handler saw %q, want tls", plain, body)
		}
		resp, err = (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + "/")
		switch {
		case plain && (err != nil || resp.StatusCode != 200):
			t.Errorf("plain HTTP allowed but refused: %v %v", resp, err)
		case !plain && (err != nil || resp.StatusCode != http.StatusUpgradeRequired):
			t.Errorf("plain HTTP not allowed, answered %v %v", resp, err)
		}
		if resp != nil {
			resp.Body.Close()
		}
		for i, c := range stalled {
			// Cut at the 500 ms header deadline: read to its end well
			// before this 3 s one.
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			if _, err := io.Copy(io.Discard, c); err != nil && strings.Contains(err.Error(), "timeout") {
				t.Errorf("plain=%v: staller %d still open after the header deadline", plain, i)
			}
			c.Close()
		}
		srv.Close()
	}
}
