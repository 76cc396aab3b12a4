// Command delaylink joins two TUN devices and holds every packet for half
// a round trip before passing it on: a network link of a given latency,
// which make bench measures the live mount across (this kernel has no
// netem). The devices live as long as the process; a script moves one of
// them into a network namespace and gives both their addresses.
//
//	delaylink -rtt 20ms -a awlA -b awlB
//
// It prints "ready" once both devices exist. There is no rate limit: the
// link carries what this process can copy (tens of MB/s on a small
// machine); a queue longer than maxQueued packets drops, as a router's
// would. Linux only.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	mtu       = 1500
	maxQueued = 8192 // packets in flight per direction
)

func main() {
	rtt := flag.Duration("rtt", 20*time.Millisecond, "the round trip the link adds")
	a := flag.String("a", "awlA", "name of the first TUN device")
	b := flag.String("b", "awlB", "name of the second TUN device")
	flag.Parse()
	if err := run(*rtt, *a, *b); err != nil {
		fmt.Fprintln(os.Stderr, "delaylink:", err)
		os.Exit(1)
	}
}

func run(rtt time.Duration, nameA, nameB string) error {
	devA, err := openTUN(nameA)
	if err != nil {
		return err
	}
	defer devA.Close()
	devB, err := openTUN(nameB)
	if err != nil {
		return err
	}
	defer devB.Close()
	fmt.Println("ready")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var wg sync.WaitGroup
	for _, dir := range [][2]*os.File{{devA, devB}, {devB, devA}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			forward(ctx, dir[0], dir[1], rtt/2)
		}()
	}
	<-ctx.Done()
	// Closing the devices ends the reads the forwarders block in.
	devA.Close()
	devB.Close()
	wg.Wait()
	return nil
}

type packet struct {
	due  time.Time
	data []byte
}

// forward copies packets from one device to the other, each delay after
// it was read, in the order read.
func forward(ctx context.Context, from, to *os.File, delay time.Duration) {
	queue := make(chan packet, maxQueued)
	pool := sync.Pool{New: func() any { b := make([]byte, mtu+64); return &b }}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for p := range queue {
			if d := time.Until(p.due); d > 0 {
				time.Sleep(d)
			}
			to.Write(p.data) // a write refused (the device went down) loses the packet, as a link would
			b := p.data[:cap(p.data)]
			pool.Put(&b)
		}
	}()
	defer wg.Wait()
	defer close(queue)
	for ctx.Err() == nil {
		b := *pool.Get().(*[]byte)
		n, err := from.Read(b)
		if err != nil {
			return
		}
		select {
		case queue <- packet{due: time.Now().Add(delay), data: b[:n]}:
		default: // the queue is full: dropped
		}
	}
}

// openTUN creates the TUN device name (IFF_TUN, no packet information)
// and returns its descriptor.
func openTUN(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	var req struct {
		name  [unix.IFNAMSIZ]byte
		flags uint16
		_     [22]byte
	}
	copy(req.name[:], name)
	req.flags = unix.IFF_TUN | unix.IFF_NO_PI
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req))); errno != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("create TUN device %s: %w", name, errno)
	}
	// Non-blocking, so that the runtime's poller waits for packets and
	// Close ends a read.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}
