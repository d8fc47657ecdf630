package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/settings"
)

// removedReminder is how often a removed broker repeats why it does
// nothing: one line at start scrolls away in a pod's log.
const removedReminder = time.Minute

// serveRemoved is what a broker the cluster removed for good does instead
// of joining: nothing a member does (no log, no slots, no copies), but it
// stays up and says so — GET /v1/admin/node answers removed, /readyz 503,
// the metric picomq_member_removed is 1, every other request is refused
// with MEMBER_REMOVED, and the log repeats it — so that the operator's
// status and an alert name it, rather than a pod restarting in a loop whose
// last message someone has to dig for. Its data directory is left as it
// is: what to do with it (set aside, or wiped to join as a new member) is
// the administrator's call.
func serveRemoved(ctx context.Context, cfg settings.Settings, logger *slog.Logger, reg *prometheus.Registry, sec *security, removed error) int {
	coded, _ := errs.As(removed)
	memberID := cfg.NodeID
	if coded != nil {
		if v, ok := coded.Field("member"); ok {
			memberID = fmt.Sprint(v)
		}
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "picomq_member_removed",
		Help: "1 when the cluster removed this broker's member for good: it serves nothing until its data directory is set aside or wiped.",
	}, func() float64 { return 1 }))
	say := func() {
		logger.Error("this broker was removed from the cluster for good and serves nothing: set its data directory aside or wipe it (delete the PVC) to join as a new member",
			"member", memberID, "dataDir", cfg.DataDir, "err", removed)
	}
	say()
	terminationMessage(cfg.TerminationLog, removed)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		// Alive: restarting would change nothing.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET "+wire.NodePath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(wire.NodeInfo{
			NodeID: cfg.NodeID, RaftState: wire.RaftStateRemoved, ClusterID: cfg.Cluster.ID,
			MemberID: memberID, Removed: true, Problem: removed.Error(),
		})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		frontend.WriteProblem(w, r, logger, frontend.Coded(removed, "http."+r.Method), http.StatusServiceUnavailable)
	})
	// Served as the client port is (HTTPS, tokens): the operator's probes
	// and admin calls reach it the same way.
	ln, err := listenClient(cfg.Listen, sec.serverTLS(), cfg.Limits)
	if err != nil {
		logger.Error("cannot listen", "addr", cfg.Listen, "err", err)
		return exitUnavailable
	}
	srv := &http.Server{Handler: sec.wrap(mux), Protocols: clientProtocols(), HTTP2: http2Config(cfg.Limits), ReadHeaderTimeout: cfg.Limits.ReadHeaderTimeout, IdleTimeout: cfg.Limits.IdleTimeout,
		WriteTimeout: cfg.Limits.WriteTimeout, MaxHeaderBytes: int(cfg.Limits.MaxHeaderBytes)}
	logger.Info("listening", "addr", ln.Addr().String(), "node", cfg.NodeID, "dataDir", cfg.DataDir, "removed", true)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	t := time.NewTicker(removedReminder)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
			logger.Info("stopped")
			return 0
		case err := <-serveErr:
			logger.Error("the HTTP server stopped", "err", err)
			return exitSoftware
		case <-t.C:
			say()
		}
	}
}
