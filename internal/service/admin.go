package service

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/harvest-engine/harvest/internal/admin"
	"github.com/harvest-engine/harvest/internal/config"
)

// adminServer is a scheduler's or a worker's admin server on admin_addr,
// started before anything else so that an orchestrator can probe the
// process while it waits for NATS and PostgreSQL: /healthz answers 200
// from the start, /readyz "starting" until the service hands it its check
// (ready), then that check, then "stopping" once the service stops.
// Without admin_addr it serves nothing, and its methods do nothing. With
// metrics_addr it also serves /metrics alone there (metricsServer).
type adminServer struct {
	srv     *admin.Server
	metrics *metricsServer
	check   atomic.Pointer[func(context.Context) []string]
	log     *slog.Logger
}

// startAdmin serves cfg.AdminAddr, if set, with reg on /metrics, and
// reg alone on cfg.MetricsAddr, if set; reg gets the Go runtime's and the
// process's collectors too.
func startAdmin(ctx context.Context, cfg config.Config, reg *prometheus.Registry, log *slog.Logger) (*adminServer, error) {
	a := &adminServer{log: log}
	a.ready(func(context.Context) []string { return []string{"starting"} })
	m, err := startMetrics(ctx, cfg, reg, log)
	if err != nil {
		return nil, err
	}
	a.metrics = m
	if cfg.AdminAddr == "" {
		return a, nil
	}
	srv, err := admin.New(admin.Config{Addr: cfg.AdminAddr, Registry: reg, Logger: log, Ready: func(ctx context.Context) []string {
		return (*a.check.Load())(ctx)
	}})
	if err != nil {
		m.stop()
		return nil, err
	}
	if err := srv.Start(ctx); err != nil {
		m.stop()
		return nil, err
	}
	a.srv = srv
	return a, nil
}

// ready makes check the answer of /readyz.
func (a *adminServer) ready(check func(context.Context) []string) { a.check.Store(&check) }

// stopping makes /readyz answer "stopping".
func (a *adminServer) stopping() {
	a.ready(func(context.Context) []string { return []string{"stopping"} })
}

// stop stops serving; called last, so that /healthz answers while the
// service stops.
func (a *adminServer) stop() {
	a.metrics.stop()
	stopServer(a.srv, a.log, "stop admin server")
}

// stopServer stops srv, if there is one, within stopTimeout; a failure is
// logged under msg.
func stopServer(srv *admin.Server, log *slog.Logger, msg string) {
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := srv.Stop(ctx); err != nil {
		log.Warn(msg, "err", err)
	}
}

// metricsServer serves a process's registry alone on metrics_addr.
// Without metrics_addr it serves nothing, and stop does nothing.
type metricsServer struct {
	srv *admin.Server
	log *slog.Logger
}

// startMetrics adds the Go runtime's and the process's collectors to reg
// and serves it on cfg.MetricsAddr, if set.
func startMetrics(ctx context.Context, cfg config.Config, reg *prometheus.Registry, log *slog.Logger) (*metricsServer, error) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &metricsServer{log: log}
	if cfg.MetricsAddr == "" {
		return m, nil
	}
	srv, err := admin.New(admin.Config{Addr: cfg.MetricsAddr, Registry: reg, Logger: log, MetricsOnly: true})
	if err != nil {
		return nil, err
	}
	if err := srv.Start(ctx); err != nil {
		return nil, err
	}
	m.srv = srv
	return m, nil
}

func (m *metricsServer) stop() {
	stopServer(m.srv, m.log, "stop metrics server")
}
