// Package metrics is what the two daemons expose to Prometheus on
// --metrics-listen: one registry per process, the recorders the other
// packages call through interfaces they declare themselves (sshd.Metrics,
// fs.Metrics, delegator.Metrics, executor.Metrics), and the HTTP listener.
//
// No label carries a delegation id, a path or a peer's name: the label
// values are fixed sets (operation names, error codes, errno names,
// states), so neither an agent on the mount nor a peer can grow the
// registry, and a scrape leaks nothing of what is lent.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/internal/httpserve"
)

// Registry holds one daemon's metrics. Its methods are safe for
// concurrent use.
type Registry struct {
	reg *prometheus.Registry

	sftpSeconds   *prometheus.HistogramVec
	sftpHandling  prometheus.Gauge
	sftpBytes     *prometheus.CounterVec
	sftpStatus    *prometheus.CounterVec
	fuseOps       *prometheus.CounterVec
	fuseErrors    *prometheus.CounterVec
	outages       prometheus.Counter
	reconnects    prometheus.Counter
	cacheDrops    prometheus.Counter
	outageSeconds prometheus.Histogram
	refused       *prometheus.CounterVec
	agentExits    *prometheus.CounterVec
	expiries      prometheus.Counter
	archiveBytes  *prometheus.HistogramVec
}

// New is a registry with the Go runtime's and the process's collectors
// and every awcp metric, at zero.
func New() *Registry {
	r := &Registry{reg: prometheus.NewRegistry()}
	r.sftpSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "awcp_sftp_request_seconds",
		Help:    "Time the SFTP server took to handle a request, by operation (its _count is the requests served).",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1, 5},
	}, []string{"op"})
	r.sftpHandling = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "awcp_sftp_requests_handling",
		Help: "SFTP requests being handled now (their answers not yet counted in awcp_sftp_request_seconds).",
	})
	r.sftpBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "awcp_sftp_bytes_total",
		Help: "File data the SFTP server read or wrote for the mounts (op is read or write).",
	}, []string{"op"})
	r.sftpStatus = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "awcp_sftp_errors_total",
		Help: "SFTP requests answered with an error status, by status.",
	}, []string{"status"})
	r.fuseOps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "awcp_fuse_operations_total",
		Help: "FUSE requests the mounts answered, by operation.",
	}, []string{"op"})
	r.fuseErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "awcp_fuse_errors_total",
		Help: "FUSE requests the mounts answered with an error, by operation and errno.",
	}, []string{"op", "errno"})
	r.outages = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "awcp_mount_outages_total",
		Help: "Times a mount lost its connection to the delegator.",
	})
	r.reconnects = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "awcp_mount_reconnects_total",
		Help: "Times a mount got its connection to the delegator back.",
	})
	r.cacheDrops = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "awcp_mount_cache_drops_total",
		Help: "Times a mount dropped every cache: the delegator's watch began or overflowed, or the connection came back.",
	})
	r.outageSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "awcp_mount_outage_seconds",
		Help:    "How long a mount was without its connection before it got it back.",
		Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	})
	r.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "awcp_admissions_refused_total",
		Help: "Delegations refused before they began, by spec error code.",
	}, []string{"code"})
	r.agentExits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "awcp_agent_exits_total",
		Help: "Agent runs that ended, by how: completed, failed (it said so), error (it could not run), killed (cancel, expiry, shutdown).",
	}, []string{"outcome"})
	r.expiries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "awcp_lease_expiries_total",
		Help: "Leases that ran out before their delegation ended.",
	})
	r.archiveBytes = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "awcp_archive_bytes",
		Help:    "Sizes of archives: the workspace sent or received, the result sent or received.",
		Buckets: prometheus.ExponentialBuckets(4<<10, 4, 10), // 4 KiB .. 1 GiB
	}, []string{"direction"})
	r.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		r.sftpSeconds, r.sftpHandling, r.sftpBytes, r.sftpStatus, r.fuseOps, r.fuseErrors,
		r.outages, r.reconnects, r.cacheDrops, r.outageSeconds, r.refused, r.agentExits, r.expiries, r.archiveBytes,
	)
	return r
}

// Handler serves the registry in the Prometheus text format.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// CountDelegations publishes awcp_delegations{state,transport}, read from
// count at each scrape (the store is the truth; no counter drifts from
// it). kind says whose records they are, for the help text.
func (r *Registry) CountDelegations(kind string, count func() (map[[2]string]int, error)) {
	r.reg.MustRegister(&censusCollector{
		desc:  prometheus.NewDesc("awcp_delegations", "Delegations in the store ("+kind+"), by state and transport.", []string{"state", "transport"}, nil),
		count: count,
	})
}

// CountSlots publishes awcp_executor_slots{kind="max"|"free"}: how many
// delegations the executor takes at once, and how many more it would take
// now (max less active), read at each scrape — what a fleet's scheduler
// and its operator watch.
func (r *Registry) CountSlots(max int, active func() (int, error)) {
	r.reg.MustRegister(&slotsCollector{
		desc:   prometheus.NewDesc("awcp_executor_slots", "Delegation slots of this executor: max, and free now.", []string{"kind"}, nil),
		max:    max,
		active: active,
	})
}

type slotsCollector struct {
	desc   *prometheus.Desc
	max    int
	active func() (int, error)
}

func (c *slotsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *slotsCollector) Collect(ch chan<- prometheus.Metric) {
	n, err := c.active()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(c.max), "max")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(max(c.max-n, 0)), "free")
}

type censusCollector struct {
	desc  *prometheus.Desc
	count func() (map[[2]string]int, error) // by {state, transport}
}

func (c *censusCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *censusCollector) Collect(ch chan<- prometheus.Metric) {
	census, err := c.count()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for k, n := range census {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}

// SFTPHandling implements sshd.Metrics.
func (r *Registry) SFTPHandling() { r.sftpHandling.Inc() }

// SFTPRequest implements sshd.Metrics.
func (r *Registry) SFTPRequest(op string, took time.Duration) {
	r.sftpSeconds.WithLabelValues(op).Observe(took.Seconds())
	r.sftpHandling.Dec()
}

// SFTPBytes implements sshd.Metrics.
func (r *Registry) SFTPBytes(op string, n int) {
	if n > 0 {
		r.sftpBytes.WithLabelValues(op).Add(float64(n))
	}
}

// SFTPError implements sshd.Metrics.
func (r *Registry) SFTPError(status string) {
	r.sftpStatus.WithLabelValues(status).Inc()
}

// FUSEOp implements fs.Metrics.
func (r *Registry) FUSEOp(op string, errno syscall.Errno) {
	r.fuseOps.WithLabelValues(op).Inc()
	if errno != 0 {
		name := unix.ErrnoName(errno)
		if name == "" {
			name = fmt.Sprintf("errno%d", int(errno))
		}
		r.fuseErrors.WithLabelValues(op, name).Inc()
	}
}

// MountLost implements fs.Metrics.
func (r *Registry) MountLost() {
	r.outages.Inc()
}

// MountBack implements fs.Metrics.
func (r *Registry) MountBack(outage time.Duration) {
	r.reconnects.Inc()
	r.outageSeconds.Observe(outage.Seconds())
}

// CacheDropped implements fs.Metrics.
func (r *Registry) CacheDropped() {
	r.cacheDrops.Inc()
}

// Refused implements delegator.Metrics and executor.Metrics.
func (r *Registry) Refused(code string) {
	r.refused.WithLabelValues(code).Inc()
}

// AgentExited implements executor.Metrics.
func (r *Registry) AgentExited(outcome string) {
	r.agentExits.WithLabelValues(outcome).Inc()
}

// LeaseExpired implements delegator.Metrics and executor.Metrics.
func (r *Registry) LeaseExpired() {
	r.expiries.Inc()
}

// Archive implements delegator.Metrics and executor.Metrics.
func (r *Registry) Archive(direction string, n int64) {
	r.archiveBytes.WithLabelValues(direction).Observe(float64(n))
}

// Serve answers GET /metrics on ln until ctx is done. Metrics say how
// busy the daemon is, not what it lends (see the package comment), and
// the listener is off unless asked for; one on a non-loopback address is
// warned about, as anyone who reaches it can read them.
func (r *Registry) Serve(ctx context.Context, ln net.Listener, log *slog.Logger) error {
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		log.Warn("metrics are served on a non-loopback address: anyone who reaches it can read them", "addr", ln.Addr().String())
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", r.Handler())
	srv := httpserve.NewServer(mux)
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(httpserve.LimitListener(ln, 16)) }()
	select {
	case err := <-errc:
		return fmt.Errorf("metrics listener: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	srv.Shutdown(shut)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics listener: %w", err)
	}
	return nil
}

// Sum adds up the samples of family name whose labels include match: a
// counter's or gauge's value, a histogram's count of observations. It is
// how tests read what was recorded.
func (r *Registry) Sum(name string, match map[string]string) float64 {
	mfs, _ := r.reg.Gather()
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range match {
				if have[k] != v {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}
