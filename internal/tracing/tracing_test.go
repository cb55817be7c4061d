package tracing_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-engine/harvest/internal/tracing"
)

func TestOffWithoutAnEndpoint(t *testing.T) {
	for _, env := range []map[string]string{
		{},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"},
	} {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
		for k, v := range env {
			t.Setenv(k, v)
		}
		tr, err := tracing.FromEnv(context.Background(), "harvest-test")
		require.NoError(t, err)
		require.Nil(t, tr, "%v", env)
		require.False(t, tr.Enabled())

		// Off, nothing is made or carried.
		ctx, span := tr.Start(context.Background(), "x")
		require.False(t, span.IsRecording())
		h := nats.Header{}
		tr.Inject(ctx, h)
		require.Empty(t, h)
		require.Empty(t, tr.Traceparent(ctx))
		require.NoError(t, tr.Shutdown(context.Background()))
	}
}

func TestOnWithAnEndpoint(t *testing.T) {
	for _, protocol := range []string{"", "http/protobuf", "grpc"} {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
		tr, err := tracing.FromEnv(context.Background(), "harvest-test")
		require.NoError(t, err)
		require.True(t, tr.Enabled(), protocol)
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // nothing listens: do not wait for the export
		_ = tr.Shutdown(ctx)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	_, err := tracing.FromEnv(context.Background(), "harvest-test")
	require.True(t, errors.Is(err, tracing.ErrProtocol), "%v", err)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	_, err = tracing.FromEnv(context.Background(), "harvest-test")
	require.ErrorContains(t, err, "OTEL_TRACES_EXPORTER")
}

// A span's context crosses a NATS message and a stored traceparent as
// the parent of the next span, in the same trace.
func TestContextCrossesMessagesAndRows(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := tracing.New(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	ctx, root := tr.Start(context.Background(), "request")
	h := nats.Header{}
	tr.Inject(ctx, h)
	require.NotEmpty(t, h.Get(tracing.HeaderTraceparent))

	_, apply := tr.Start(tr.Extract(context.Background(), h), "apply")
	stored := tr.Traceparent(trace.ContextWithSpan(context.Background(), apply))
	require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`, stored)

	// A sender that wrote the name as net/http does.
	h2 := nats.Header{"Traceparent": []string{stored}}
	_, task := tr.Start(tr.Extract(context.Background(), h2), "task")
	_, later := tr.Start(tr.FromTraceparent(context.Background(), stored), "later")
	for _, s := range []trace.Span{task, later, apply, root} {
		s.End()
	}
	spans := exp.GetSpans()
	require.Len(t, spans, 4)
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = s
		require.Equal(t, root.SpanContext().TraceID(), s.SpanContext.TraceID(), s.Name)
	}
	require.Equal(t, byName["request"].SpanContext.SpanID(), byName["apply"].Parent.SpanID())
	require.Equal(t, byName["apply"].SpanContext.SpanID(), byName["task"].Parent.SpanID())
	require.Equal(t, byName["apply"].SpanContext.SpanID(), byName["later"].Parent.SpanID())
	require.Empty(t, tr.Traceparent(context.Background()), "no span, nothing stored")
}
