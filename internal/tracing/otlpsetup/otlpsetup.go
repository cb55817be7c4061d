// Package otlpsetup builds the tracing of Harvest's own processes (the
// ingest, scheduler and worker binaries, harvest dev) from the standard
// OpenTelemetry environment, exporting spans over OTLP.
//
// It is apart from package tracing so that only those binaries link the
// OTLP exporters and gRPC: the harvest package, which a user's worker
// imports, uses tracing alone and traces with the TracerProvider the user
// gives it (harvest.WorkerConfig.TracerProvider).
package otlpsetup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/harvest-engine/harvest/internal/tracing"
)

// ErrProtocol says OTEL_EXPORTER_OTLP_PROTOCOL names a protocol Harvest
// does not export with.
var ErrProtocol = errors.New("unsupported OTLP protocol")

// FromEnv returns the tracing the standard OpenTelemetry environment
// asks for, or nil (off) when no OTLP endpoint is set, OTEL_SDK_DISABLED
// is true or OTEL_TRACES_EXPORTER is "none". service is the default
// service.name (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override
// it). Spans go out in batches over OTLP, as
// OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL says: http/protobuf (the default)
// or grpc; the exporters read the endpoint, headers, timeout and TLS
// settings from the environment themselves, and the SDK reads
// OTEL_TRACES_SAMPLER. The returned tracing's Shutdown flushes the
// spans not yet exported and stops the exporter.
func FromEnv(ctx context.Context, service string) (*tracing.Tracing, error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	switch exp := os.Getenv("OTEL_TRACES_EXPORTER"); exp {
	case "", "otlp":
	case "none":
		return nil, nil
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: Harvest exports traces over otlp (or none)", exp)
	}
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var (
		exporter sdktrace.SpanExporter
		err      error
	)
	switch protocol {
	case "", "http/protobuf":
		exporter, err = otlptracehttp.New(ctx)
	case "grpc":
		exporter, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: %w (use http/protobuf or grpc)", protocol, ErrProtocol)
	}
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil && res == nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	return tracing.NewWithShutdown(tp, tp.Shutdown), nil
}
