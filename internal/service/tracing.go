package service

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/harvest-engine/harvest/internal/tracing"
	"github.com/harvest-engine/harvest/internal/tracing/otlpsetup"
)

// StartTracing returns the process's tracing as the standard
// OpenTelemetry environment asks (otlpsetup.FromEnv; nil, off, without an
// OTLP endpoint), and the stop that flushes its last spans.
func StartTracing(ctx context.Context, service string, log *slog.Logger) (*tracing.Tracing, func(), error) {
	tr, err := otlpsetup.FromEnv(ctx, service)
	if err != nil || tr == nil {
		return nil, func() {}, err
	}
	endpoint := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	log.Info("tracing on: exporting spans over OTLP", "endpoint", endpoint, "service_name", service)
	return tr, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tr.Shutdown(sctx); err != nil {
			log.Warn("flush the last spans", "err", err)
		}
	}, nil
}
