// Command delaylink joins two TUN devices and holds every packet for half
// a round trip before passing it on: a network link of a given latency,
// which make bench measures the live mount across (this kernel has no
// netem). The devices live as long as the process; a script moves one of
// them into a network namespace and gives both their addresses.
//
//	delaylink -rtt 20ms -a awlA -b awlB [-loss 0.01] [-rate 20e6]
//
// It prints "ready" once both devices exist. Without -rate the link
// carries what this process can copy (tens of MB/s on a small machine);
// with it, each direction sends at most that many bits a second, packets
// waiting their turn in a queue of at most maxQueueDelay, past which they
// are dropped, as a router's tail drop does. -loss drops that fraction of
// the packets at random, each direction. A queue longer than maxQueued
// packets drops too. Linux only.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
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
	// maxQueueDelay is the most a packet waits for a rate-capped link,
	// a home router's buffer.
	maxQueueDelay = 50 * time.Millisecond
)

// link is what a direction does to each packet.
type link struct {
	delay time.Duration // half the round trip
	loss  float64       // the fraction dropped at random
	rate  float64       // bits a second; 0: as fast as it copies
}

func main() {
	rtt := flag.Duration("rtt", 20*time.Millisecond, "the round trip the link adds")
	loss := flag.Float64("loss", 0, "the fraction of packets dropped at random, each direction (0.01: 1%)")
	rate := flag.Float64("rate", 0, "bits a second each direction carries at most (20e6: 20 Mbit/s); 0: no cap")
	a := flag.String("a", "awlA", "name of the first TUN device")
	b := flag.String("b", "awlB", "name of the second TUN device")
	flag.Parse()
	if *loss < 0 || *loss >= 1 || *rate < 0 {
		fmt.Fprintln(os.Stderr, "delaylink: -loss is a fraction below 1, -rate a number of bits a second")
		os.Exit(2)
	}
	if err := run(link{delay: *rtt / 2, loss: *loss, rate: *rate}, *a, *b); err != nil {
		fmt.Fprintln(os.Stderr, "delaylink:", err)
		os.Exit(1)
	}
}

func run(l link, nameA, nameB string) error {
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
			forward(ctx, dir[0], dir[1], l)
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

// forward copies packets from one device to the other, each the link's
// delay after it was read (and after its turn on a capped link), in the
// order read, less those the link drops.
func forward(ctx context.Context, from, to *os.File, l link) {
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
	var free time.Time // when a capped link has sent what it queued
	for ctx.Err() == nil {
		b := *pool.Get().(*[]byte)
		n, err := from.Read(b)
		if err != nil {
			return
		}
		now := time.Now()
		if l.loss > 0 && rand.Float64() < l.loss {
			pool.Put(&b)
			continue
		}
		sent := now
		if l.rate > 0 {
			if free.Before(now) {
				free = now
			}
			if free.Sub(now) > maxQueueDelay { // the router's buffer is full
				pool.Put(&b)
				continue
			}
			free = free.Add(time.Duration(float64(n*8) / l.rate * float64(time.Second)))
			sent = free
		}
		select {
		case queue <- packet{due: sent.Add(l.delay), data: b[:n]}:
		default: // the queue is full: dropped
			pool.Put(&b)
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
