package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor"
	awcpfs "github.com/awcp/awcp/fs"
	"github.com/awcp/awcp/lease"
	wire "github.com/awcp/awcp/sshd/sftpwire"
	"github.com/awcp/awcp/test/bench/benchd"
)

// flood is the attack of issue 24 on a real `awcp-ctl serve`: whoever holds
// a delegation's certificate pipelines reads READs of 1 MiB and never reads
// an answer. The certificate comes from an executor in this process whose
// live-mount transport keeps the credential instead of mounting. It prints
// the daemon's RSS before, at its peak during the flood (target: 64 MiB of
// growth at most), and a few seconds after the connection is dropped.
func flood(bin, dir string, reads int) error {
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(ws, "big"), make([]byte, 1<<20), 0o644); err != nil {
		return err
	}
	peer, creds, stopExec, err := capturingExecutor(dir)
	if err != nil {
		return err
	}
	defer stopExec()
	ctl, err := benchd.StartCtl(bin, dir, nil)
	if err != nil {
		return err
	}
	d := &daemons{ctl}
	defer d.Stop()
	idb, err := d.Run("export", ws, "--peer", peer, "--plain-http", "--transport", "sshfs", "--background", "--prompt", "flood") // the executor in this process serves plain HTTP
	if err != nil {
		return err
	}
	defer d.Run("cancel", strings.TrimSpace(string(idb)))
	var info *control.WorkDirInfo
	select {
	case info = <-creds:
	case <-time.After(30 * time.Second):
		return errors.New("no START reached the executor")
	}
	// Twice, on a fresh connection each: the second shows whether what
	// the first left in the process (pages the Go runtime keeps for
	// reuse) is reused or added to.
	pid := d.Ctl.Process.Pid
	before := procStat(pid).rss
	fmt.Printf("flood, %d pipelined READs of 1 MiB never read, on awcp-ctl serve (RSS %d MiB before):", reads, before>>20)
	var growth int64
	for round := 1; round <= 2; round++ {
		peak, after, err := floodOnce(info, pid, reads)
		if err != nil {
			return err
		}
		growth = max(growth, peak-before)
		fmt.Printf(" round %d peak %d MiB, %d MiB 5 s after closing;", round, peak>>20, after>>20)
	}
	verdict := "ok (<= 64 MiB)"
	if growth > 64<<20 {
		verdict = "MISSED: target 64 MiB"
	}
	fmt.Printf(" growth %d MiB, %s\n", growth>>20, verdict)
	return nil
}

// floodOnce floods on a new connection for 3 s, closes it, and returns the
// daemon's peak RSS meanwhile and its RSS 5 s after.
func floodOnce(info *control.WorkDirInfo, pid, reads int) (peak, after int64, err error) {
	s, err := dialSFTP(info)
	if err != nil {
		return 0, 0, err
	}
	defer s.Close()
	h, err := s.open("/big")
	if err != nil {
		return 0, 0, err
	}
	sent := make(chan struct{})
	go func() { defer close(sent); s.reads(h, reads) }() // blocks once the server stops reading
	for range 30 {
		time.Sleep(100 * time.Millisecond)
		peak = max(peak, procStat(pid).rss)
	}
	s.Close()
	<-sent
	time.Sleep(5 * time.Second)
	return peak, procStat(pid).rss, nil
}

// capturingExecutor runs an executor on loopback whose live-mount
// transport hands each START's workDir to creds instead of mounting.
func capturingExecutor(dir string) (url string, creds <-chan *control.WorkDirInfo, stop func(), err error) {
	store, err := lease.Open(filepath.Join(dir, "exec", "executor.db"), lease.Options{})
	if err != nil {
		return "", nil, nil, err
	}
	ch := make(chan *control.WorkDirInfo, 1)
	e, err := executor.New(executor.Options{
		WorkRoot: filepath.Join(dir, "work"), AgentCommand: "sleep 600", Store: store,
		StateDir: filepath.Join(dir, "exec"), Transports: []control.ExecutorTransport{capture(ch)},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		store.Close()
		return "", nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		store.Close()
		return "", nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &http.Server{Handler: e.Handler()}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); e.Run(ctx) }()
	go func() { defer wg.Done(); srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), ch, func() {
		srv.Close()
		cancel()
		wg.Wait()
		store.Close()
	}, nil
}

// capture is a live-mount transport that mounts nothing: it keeps START's
// workDir.
type capture chan<- *control.WorkDirInfo

func (capture) Name() string     { return control.TransportSSHFS }
func (capture) Available() error { return nil }
func (c capture) Setup(_ context.Context, p control.SetupParams) error {
	select {
	case c <- p.Info:
	default:
	}
	return nil
}
func (capture) Teardown(context.Context, string, string, io.Writer) (bool, error) { return false, nil }

// rawSFTP is an SFTP session spoken byte by byte.
type rawSFTP struct {
	conn *gossh.Client
	w    io.WriteCloser
	r    io.Reader
}

func dialSFTP(info *control.WorkDirInfo) (*rawSFTP, error) {
	signer, err := awcpfs.CertSigner(info.Credential.PrivateKey, info.Credential.Certificate)
	if err != nil {
		return nil, err
	}
	hostKey, _, _, _, err := gossh.ParseAuthorizedKey([]byte(info.HostKey))
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	addr := net.JoinHostPort(info.Endpoint.Host, fmt.Sprint(info.Endpoint.Port))
	conn, err := gossh.Dial("tcp", addr, &gossh.ClientConfig{User: info.Endpoint.User,
		Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)}, HostKeyCallback: gossh.FixedHostKey(hostKey),
		Timeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	sess, err := conn.NewSession()
	if err != nil {
		conn.Close()
		return nil, err
	}
	w, _ := sess.StdinPipe()
	r, _ := sess.StdoutPipe()
	if err := sess.RequestSubsystem("sftp"); err != nil {
		conn.Close()
		return nil, err
	}
	s := &rawSFTP{conn: conn, w: w, r: r}
	if err := s.send(wire.Init, 3, nil); err != nil {
		conn.Close()
		return nil, err
	}
	if typ, _, err := s.reply(); err != nil || typ != wire.Version {
		conn.Close()
		return nil, fmt.Errorf("no VERSION: %v", err)
	}
	return s, nil
}

func (s *rawSFTP) Close() error { return s.conn.Close() }

// send writes a packet of type typ with id (or INIT's version), and the
// body fill encodes.
func (s *rawSFTP) send(typ byte, id uint32, fill func(e *wire.Encoder)) error {
	var e wire.Encoder
	e.U32(0) // length, set below
	e.Byte(typ)
	e.U32(id)
	if fill != nil {
		fill(&e)
	}
	e.SetU32(0, uint32(len(e)-4))
	_, err := s.w.Write(e)
	return err
}

func (s *rawSFTP) reply() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(s.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:4])-1)
	_, err := io.ReadFull(s.r, body)
	return hdr[4], body, err
}

// open opens name for reading and returns its handle.
func (s *rawSFTP) open(name string) (string, error) {
	err := s.send(wire.Open, 1, func(e *wire.Encoder) {
		e.Str(name)
		e.U32(wire.FlagRead)
		e.U32(0) // no attributes
	})
	if err != nil {
		return "", err
	}
	typ, b, err := s.reply()
	d := wire.Decoder{B: b}
	d.U32() // id
	handle := d.Str()
	if err != nil || typ != wire.Handle || d.Err != nil {
		return "", fmt.Errorf("OPEN %s: answer of type %d: %v", name, typ, err)
	}
	return handle, nil
}

// reads sends n READs of 1 MiB of handle and reads no answer.
func (s *rawSFTP) reads(handle string, n int) {
	for i := range n {
		read := func(e *wire.Encoder) { e.Str(handle); e.U64(0); e.U32(1 << 20) }
		if s.send(wire.Read, uint32(2+i), read) != nil {
			return
		}
	}
}
