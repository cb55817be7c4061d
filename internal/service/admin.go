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
// Without admin_addr it serves nothing, and its methods do nothing.
type adminServer struct {
	srv   *admin.Server
	check atomic.Pointer[func(context.Context) []string]
	log   *slog.Logger
}

// startAdmin serves cfg.AdminAddr, if set, with reg on /metrics; reg gets
// the Go runtime's and the process's collectors too.
func startAdmin(ctx context.Context, cfg config.Config, reg *prometheus.Registry, log *slog.Logger) (*adminServer, error) {
	a := &adminServer{log: log}
	a.ready(func(context.Context) []string { return []string{"starting"} })
	if cfg.AdminAddr == "" {
		return a, nil
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := admin.New(admin.Config{Addr: cfg.AdminAddr, Registry: reg, Logger: log, Ready: func(ctx context.Context) []string {
		return (*a.check.Load())(ctx)
	}})
	if err != nil {
		return nil, err
	}
	if err := srv.Start(ctx); err != nil {
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
	if a.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := a.srv.Stop(ctx); err != nil {
		a.log.Warn("stop admin server", "err", err)
	}
}
