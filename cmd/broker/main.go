// Command broker runs one PicoMQ broker: the durable stream broker core on a
// data directory, with its HTTP API (partitioned-log and admin API,
// /healthz, /readyz, Prometheus /metrics) on one port, 4437 by default.
//
//	go run ./cmd/broker --data-dir /var/lib/picomq
//
// Flags and their PICOMQ_* variables are listed by --help. On SIGTERM or
// SIGINT it stops accepting requests (readyz answers 503, long-polls end),
// drains those in flight for up to --shutdown-timeout, then closes the
// broker, which flushes pending appends and closes the streams it owns.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/picomq/picomq/broker/auth"
	"github.com/picomq/picomq/broker/cluster"
	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/diskspace"
	"github.com/picomq/picomq/broker/dsapi"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/framing"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/httpapi"
	"github.com/picomq/picomq/broker/membership"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/objstore"
	"github.com/picomq/picomq/broker/settings"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	go func() {
		<-ctx.Done()
		stop() // a second signal during the drain ends the process at once
	}()
	code := run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil)
	if code == restartCode {
		restartProcess() // returns only when the process cannot be replaced
		code = exitSoftware
	}
	os.Exit(code)
}

// restartCode is what run returns when the broker stopped to start again
// (a recovery of the metadata log was asked for): main replaces the process
// with a new run of the same command, so that the pod, or whatever started
// the broker, sees it carry on.
const restartCode = -1

// restartProcess replaces this process with the same command, arguments
// and environment.
func restartProcess() {
	exe, err := os.Executable()
	if err == nil {
		err = syscall.Exec(exe, os.Args, os.Environ())
	}
	fmt.Fprintf(os.Stderr, "broker: restarting failed: %v\n", err)
}

// Exit codes beside the coded errors' own (sysexits.h).
const (
	exitUsage       = 64
	exitSoftware    = 70
	exitUnavailable = 69
	exitTempFail    = 75
)

// errRestart is the cause of a stop that restarts the broker.
var errRestart = errors.New("restart")

// run runs the broker until ctx ends and returns the process exit code.
// started, when set, is told the address the API listens on.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, started func(addr string)) int {
	ctx, stopFor := context.WithCancelCause(ctx)
	defer stopFor(nil)
	cfg, err := settings.Parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "broker: %v\n", err)
		terminationMessage(cfg.TerminationLog, err)
		return exitUsage
	}
	if cfg.CheckConfig {
		fmt.Fprintf(stderr, "broker: configuration ok (%s)\n", describe(cfg))
		return 0
	}
	logger := newLogger(cfg, stderr)
	sec, err := loadSecurity(cfg, logger)
	if err != nil {
		logger.Error("cannot load the TLS or token settings", "err", err)
		terminationMessage(cfg.TerminationLog, err)
		return exitUsage
	}
	sec.run(ctx)
	gcAttrs, undoGC := applyGCSettings(getenv, os.ReadFile)
	defer undoGC()
	logger.Info("garbage collector", gcAttrs...)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	sec.register(reg)
	var testClock *httpapi.ManualClock
	clock := time.Now
	if cfg.TestClock {
		testClock = httpapi.NewManualClock(time.Now())
		clock = testClock.Now
		logger.Warn("test clock enabled: records are dated by a clock that stands still until PUT /v1/admin/clock sets it; never use this in production")
	}
	raftLog := io.Discard
	if cfg.LogLevel <= slog.LevelDebug {
		raftLog = stderr
	}

	// Measured before anything opens: on a full volume the reserve file
	// is released first, so that the metadata log has room to start.
	disk, err := openDisk(cfg, logger, reg)
	if err != nil {
		logger.Error("cannot open the broker: its data volume cannot be measured", "dataDir", cfg.DataDir, "err", err)
		terminationMessage(cfg.TerminationLog, fmt.Errorf("cannot open the broker on %s (measuring its volume): %w", cfg.DataDir, err))
		return errs.ExitCode(err)
	}
	diskStop := make(chan struct{})
	defer close(diskStop)
	go disk.Run(diskStop, time.Second)

	var cl *cluster.Cluster
	if cfg.Cluster.Name != "" {
		cl, err = cluster.Prepare(ctx, cfg, logger, reg, sec.peerServerTLS(), sec.clientTLS())
		if errors.Is(err, node.MemberRemoved) && cluster.DrainedHere(cfg.DataDir) {
			// A drained member's directory (a claim kept after a scale
			// down, handed to a later scale up): it holds nothing the
			// others lack, so it is set aside and the broker joins anew —
			// once the leader took the old member out of the
			// configuration, where a voter's log still counts for the
			// quorum until then.
			if cluster.StillConfigured(err) {
				logger.Info("this data directory is a drained member's, still in the metadata log's configuration: waiting for the leader to take it out before setting it aside", "dataDir", cfg.DataDir)
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
				}
				return exitTempFail // started again, it looks again
			}
			logger.Info("this data directory is a drained member's: setting it aside and joining the cluster as a new member", "dataDir", cfg.DataDir)
			if err = cluster.SetAsideDrained(cfg.DataDir, time.Now()); err == nil {
				return restartCode
			}
			logger.Error("cannot set a drained member's data directory aside", "err", err)
		}
		if err != nil {
			if errors.Is(err, node.MemberRemoved) {
				return serveRemoved(ctx, cfg, logger, reg, sec, err)
			}
			logger.Error("cannot take this broker's place in its cluster", "err", err)
			terminationMessage(cfg.TerminationLog, fmt.Errorf("cannot take this broker's place in its cluster: %w", err))
			return errs.ExitCode(err)
		}
	}
	coreCfg := core.Config{
		DataDir:        cfg.DataDir,
		NodeID:         cfg.NodeID,
		FlushLinger:    cfg.FlushLinger,
		SyncLinger:     settings.ZeroMeansNever(cfg.SyncLinger),
		MaxBatchBytes:  cfg.MaxBatchBytes,
		InlineBytes:    settings.ZeroMeansNever(cfg.InlineBytes),
		PageCacheBytes: settings.ZeroMeansNever(cfg.PageCacheBytes),
		Clock:          clock,
		Logger:         logger,
		Metrics:        core.NewMetrics(reg),
		RaftLog:        raftLog,
		Disk:           disk,
	}
	sizeForVolume(&coreCfg, disk.Total())
	if coreCfg.Tier, err = tierConfig(cfg.Tier, cfg.DataDir, reg, logger); err != nil {
		if cl != nil {
			cl.Close()
		}
		logger.Error("cannot configure tiered storage", "err", err)
		terminationMessage(cfg.TerminationLog, err)
		return 78 // EX_CONFIG
	}
	if cl != nil {
		cl.Configure(&coreCfg)
	}
	b, err := core.Open(coreCfg)
	if err != nil {
		if cl != nil {
			cl.Close()
		}
		logger.Error("cannot open the broker", "dataDir", cfg.DataDir, "err", err)
		terminationMessage(cfg.TerminationLog, fmt.Errorf("cannot open the broker on %s: %w", cfg.DataDir, err))
		return errs.ExitCode(err)
	}
	if cl != nil {
		if err := cl.Start(ctx, b); err != nil {
			logger.Error("cannot start the cluster member", "err", err)
			terminationMessage(cfg.TerminationLog, err)
			_ = b.Close()
			cl.Close()
			return errs.ExitCode(err)
		}
	}
	front := frontend.Options{LongPollTimeout: cfg.LongPollTimeout, MaxBodyBytes: cfg.MaxBodyBytes, Logger: logger}
	apiOpts := httpapi.Options{Options: front, MaxBatchRecords: cfg.MaxBatchRecords, Registerer: reg, TestClock: testClock, DefaultPolicy: cfg.DefaultStreamPolicy}
	if cl != nil {
		apiOpts.Cluster, apiOpts.Drain = cl.NodeInfo, cl
	}
	if coreCfg.Tier != nil {
		apiOpts.Tier = tierStatus(b)
	}
	api := httpapi.New(b, reg, apiOpts)
	reg.MustRegister(core.NewGroupLagCollector(b, cfg.GroupLagMaxSeries))
	ds := dsapi.New(b, dsapi.Options{Options: front})
	api.Handle(dsapi.Prefix, ds) // the Durable Streams protocol
	api.Handle(auth.SignPath, sec.signer(logger))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "picomq_stream_reads_waiting", Help: "Durable Streams long-polls and SSE responses waiting for records now.",
	}, func() float64 { return float64(ds.Waiting()) }))
	if cl != nil {
		cl.SetRestart(func() { stopFor(errRestart) })
		api.Handle("POST "+membership.RecoverPath, cl.ServeRecover())
	}
	if cfg.Pprof {
		api.Handle("/debug/pprof/", collectFirst(http.HandlerFunc(pprof.Index)))
		api.Handle("/debug/pprof/profile", http.HandlerFunc(pprof.Profile))
		api.Handle("/debug/pprof/trace", http.HandlerFunc(pprof.Trace))
		logger.Warn("profiler enabled under /debug/pprof/ on the API port")
	}

	var handler http.Handler = api
	var router interface{ Drain() }
	if cl != nil {
		r := cl.Router(api, cfg.MaxBodyBytes, reg)
		handler, router = cl.RefuseOnceDrained(r, logger), r
	}
	handler = sec.wrap(handler)
	ln, err := listenClient(cfg.Listen, sec.serverTLS(), cfg.Limits)
	if err != nil {
		logger.Error("cannot listen", "addr", cfg.Listen, "err", err)
		terminationMessage(cfg.TerminationLog, fmt.Errorf("cannot listen on %s: %w", cfg.Listen, err))
		if cerr := b.Close(); cerr != nil {
			logger.Error("closing the broker failed", "err", cerr)
		}
		if cl != nil {
			cl.Close()
		}
		return exitUnavailable
	}
	srv := &http.Server{
		Handler:           framing.BodyDeadline(handler, cfg.Limits.BodyReadTimeout),
		Protocols:         clientProtocols(),
		HTTP2:             http2Config(cfg.Limits),
		ReadHeaderTimeout: cfg.Limits.ReadHeaderTimeout,
		WriteTimeout:      writeTimeout(cfg),
		IdleTimeout:       cfg.Limits.IdleTimeout,
		// framing refuses a larger head first, with a coded 431; this is
		// net/http's own bound behind it.
		MaxHeaderBytes: int(cfg.Limits.MaxHeaderBytes),
		ErrorLog:       log.New(&slogWriter{logger}, "", 0),
	}
	logger.Info("listening", "addr", ln.Addr().String(), "node", cfg.NodeID, "dataDir", cfg.DataDir, "tls", sec.cert != nil, "tokens", sec.tokens != nil)
	if started != nil {
		started(ln.Addr().String())
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	code := 0
	select {
	case <-ctx.Done():
		if context.Cause(ctx) == errRestart {
			logger.Warn("restarting as asked: to open the metadata log with a recovery, or to join as a new member after a drain cancelled once complete")
			code = restartCode
		} else {
			logger.Info("shutting down: draining requests", "timeout", cfg.ShutdownTimeout)
		}
	case err := <-serveErr:
		logger.Error("the HTTP server stopped", "err", err)
		code = exitSoftware
	}
	if cl != nil && code != restartCode {
		// A broker restarting for a recovery has no quorum to hand
		// anything over through.
		cl.Leave(context.Background())
	}
	api.Drain()
	ds.Drain()
	if router != nil {
		router.Drain()
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("requests still in flight after the shutdown timeout: closing their connections", "err", err)
		_ = srv.Close()
	}
	if err := b.Close(); err != nil {
		logger.Error("closing the broker failed", "err", err)
		if code == 0 || code == restartCode {
			code = errs.ExitCode(err)
		}
	}
	if cl != nil {
		cl.Close()
	}
	logger.Info("stopped")
	return code
}

// writeTimeout is --write-timeout, raised when needed above the longest
// answer the broker gives on purpose — a long-poll (--long-poll-timeout) or
// an SSE response (60 s) — so that the bound never cuts one mid-answer.
func writeTimeout(cfg settings.Settings) time.Duration {
	w := cfg.Limits.WriteTimeout
	if w == 0 {
		return 0
	}
	return max(w, cfg.LongPollTimeout+30*time.Second, dsapi.DefaultSSEMaxDuration+30*time.Second)
}

// sizeForVolume scales what the metadata log and the journal keep on disk
// to a small volume: the log's segments (a few stay, with a zeroed spare),
// the inline frames gathered before a snapshot and the journal's segments,
// which on a 64 MiB volume were the 16 MiB, 64 MiB and 64 MiB defaults —
// most of it.
func sizeForVolume(c *core.Config, total int64) {
	if total <= 0 {
		return
	}
	c.WALSegmentBytes = int(min(max(total/64, 1<<20), 16<<20))
	c.InlineLogBytes = min(max(total/16, 1<<20), 64<<20)
	// The journal's segment being written is dropped only once full and
	// checkpointed: on a small volume a large one would hold, after
	// deletes, what the volume needs back.
	c.JournalSegmentBytes = min(max(total/64, 1<<20), core.DefaultJournalSegmentBytes)
}

// openDisk prepares the data directory and starts watching its volume.
func openDisk(cfg settings.Settings, logger *slog.Logger, reg prometheus.Registerer) (*diskspace.Monitor, error) {
	if err := objstore.PrepareDir(cfg.DataDir); err != nil {
		return nil, err
	}
	return diskspace.New(diskspace.Options{Dir: cfg.DataDir, Headroom: cfg.DiskHeadroom, Logger: logger, Registerer: reg})
}

func newLogger(cfg settings.Settings, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// slogWriter turns the http.Server's log lines into warnings.
type slogWriter struct{ l *slog.Logger }

func (w *slogWriter) Write(p []byte) (int, error) {
	msg := string(p)
	for len(msg) > 0 && msg[len(msg)-1] == '\n' {
		msg = msg[:len(msg)-1]
	}
	w.l.Warn("http server", "msg", msg)
	return len(p), nil
}

// terminationMessage writes why the broker could not run to path, the
// container's termination-message file, so that Kubernetes shows it in the
// pod's status (lastState.terminated.message) and the operator can name it.
// A path that cannot be written — not in a container — is ignored.
func terminationMessage(path string, err error) {
	if path == "" {
		return
	}
	msg := err.Error()
	if len(msg) > 4096 { // the kubelet keeps at most 4096 bytes
		msg = msg[:4096]
	}
	_ = os.WriteFile(path, []byte(msg+"\n"), 0o644)
}

// describe summarizes a configuration for --check-config.
func describe(s settings.Settings) string {
	mode := "a lone broker"
	if c := s.Cluster; c.Name != "" {
		mode = fmt.Sprintf("node %s of cluster %s/%s, %d slots, leases %v/%v/%v", s.NodeID, c.Namespace, c.Name, c.Slots, c.LeaseDuration, c.RenewDeadline, c.RetryPeriod)
	}
	return fmt.Sprintf("data %s, listen %s, %s", s.DataDir, s.Listen, mode)
}
