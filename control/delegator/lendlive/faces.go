package lendlive

import (
	"fmt"
	"net"
	"strconv"
	"sync"
)

// The daemon (`awcp-ctl serve`) lends to executors on any network, but
// opens its SSH port only where one of them is: on the address facing
// each executor (AdvertiseHost), when a delegation to it starts, and
// closes it when the last delegation on that address ends. Its own
// listener stays on loopback. It tries the main listener's port on each
// address first, so that executors see one port.

// faces are the per-address listeners of one SSH server.
type faces struct {
	main  string                     // the main listener's address: no other is opened there
	port  int                        // the main listener's: tried first on each address
	serve func(ln net.Listener)      // serves ln until it is closed
	mu    sync.Mutex                 // guards hosts and users
	hosts map[string]*face           // by address
	users map[string]map[string]bool // delegation ids by address
}

// face is one address's listener.
type face struct {
	ln   net.Listener
	port int
	done chan struct{} // closed when its serve has returned
}

func newFaces(main *net.TCPAddr, serve func(net.Listener)) *faces {
	return &faces{main: main.IP.String(), port: main.Port, serve: serve, hosts: map[string]*face{}, users: map[string]map[string]bool{}}
}

// open returns the port listening on host for delegation id (""
// for a caller that holds none, such as the reachability probe: the
// listener then stays until a delegation's use of it ends), opening it on
// first use.
func (f *faces) open(host, id string) (int, error) {
	if ip := net.ParseIP(host); ip != nil && ip.String() == f.main {
		return f.port, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fc := f.hosts[host]
	if fc == nil {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(f.port)))
		if err != nil {
			// The main port is taken on that address: any other.
			ln, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
		}
		if err != nil {
			return 0, fmt.Errorf("the SSH server cannot listen on %s: %w", host, err)
		}
		fc = &face{ln: ln, port: ln.Addr().(*net.TCPAddr).Port, done: make(chan struct{})}
		f.hosts[host] = fc
		f.users[host] = map[string]bool{}
		go func() { defer close(fc.done); f.serve(ln) }()
	}
	if id != "" {
		f.users[host][id] = true
	}
	return fc.port, nil
}

// release ends delegation id's use of every address; an address no
// delegation uses any more is closed.
func (f *faces) release(id string) {
	f.mu.Lock()
	var closing []*face
	for host, ids := range f.users {
		if !ids[id] {
			continue
		}
		delete(ids, id)
		if len(ids) == 0 {
			closing = append(closing, f.hosts[host])
			delete(f.hosts, host)
			delete(f.users, host)
		}
	}
	f.mu.Unlock()
	for _, fc := range closing {
		fc.ln.Close()
		<-fc.done
	}
}

// closeAll closes every listener, for the server's end.
func (f *faces) closeAll() {
	f.mu.Lock()
	all := f.hosts
	f.hosts, f.users = map[string]*face{}, map[string]map[string]bool{}
	f.mu.Unlock()
	for _, fc := range all {
		fc.ln.Close()
		<-fc.done
	}
}

// listening is the addresses listened on now, for tests and logs.
func (f *faces) listening() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, fc := range f.hosts {
		out = append(out, fc.ln.Addr().String())
	}
	return out
}
