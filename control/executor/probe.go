package executor

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/internal/httpserve"
)

// Reachability probe (GET /awcp/probe?port=N): can this executor open a
// connection to the caller's SSH port, as a live mount would? It dials
// only the address the request came from, so it is no way to make the
// executor reach a third machine; and it holds at most probeSlots dials at
// once, each bounded by probeTimeout.

const (
	probeSlots   = 4
	probeTimeout = 3 * time.Second
)

func (e *Executor) handleProbe(w http.ResponseWriter, r *http.Request) {
	if !e.authorized(w, r, "") {
		return
	}
	port, err := strconv.Atoi(r.URL.Query().Get("port"))
	if err != nil || port < 1 || port > 65535 {
		writeError(w, http.StatusBadRequest, control.NewError("", control.CodeDeclined, "port must be 1..65535", "GET /awcp/probe?port=N"))
		return
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		writeError(w, http.StatusBadRequest, control.NewError("", control.CodeDeclined, "no caller address", ""))
		return
	}
	select {
	case e.probes <- struct{}{}:
		defer func() { <-e.probes }()
	default:
		writeError(w, http.StatusTooManyRequests, control.NewError("", control.CodeDeclined, "too many probes at once", "try again"))
		return
	}
	httpserve.WriteJSON(w, http.StatusOK, probe(net.JoinHostPort(host, strconv.Itoa(port))))
}

// probe dials addr and reads the first line it sends.
func probe(addr string) control.ProbeResult {
	conn, err := net.DialTimeout("tcp", addr, probeTimeout)
	if err != nil {
		return control.ProbeResult{Error: "cannot connect: " + strings.TrimPrefix(err.Error(), "dial tcp "+addr+": ")}
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(probeTimeout))
	line, err := bufio.NewReaderSize(conn, 256).ReadSlice('\n')
	res := control.ProbeResult{Reachable: true, SSH: strings.HasPrefix(string(line), "SSH-2.0-")}
	if !res.SSH && err != nil {
		res.Error = "connected, but no SSH greeting came"
	}
	return res
}
