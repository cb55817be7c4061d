package tracing_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-engine/harvest/internal/tracing"
)

// A nil *Tracing is tracing off: nothing is made or carried.
func TestNilIsOff(t *testing.T) {
	var tr *tracing.Tracing
	require.False(t, tr.Enabled())
	require.Nil(t, tr.Provider())
	ctx, span := tr.Start(context.Background(), "x")
	require.False(t, span.IsRecording())
	h := nats.Header{}
	tr.Inject(ctx, h)
	require.Empty(t, h)
	require.Empty(t, tr.Traceparent(ctx))
	tr.SetHeader(h, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	require.Empty(t, h)
	require.NoError(t, tr.Shutdown(context.Background()))
}

// New leaves the provider to its owner; NewWithShutdown hands Shutdown
// the owner's flush.
func TestShutdownIsTheOwners(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	require.NoError(t, tracing.New(tp).Shutdown(context.Background()))
	calls := 0
	tr := tracing.NewWithShutdown(tp, func(ctx context.Context) error { calls++; return tp.Shutdown(ctx) })
	require.NoError(t, tr.Shutdown(context.Background()))
	require.Equal(t, 1, calls)
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
