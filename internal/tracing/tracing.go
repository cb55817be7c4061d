package tracing

import (
	"context"
	"net/textproto"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// HeaderTraceparent is the W3C header that carries a span context.
const HeaderTraceparent = "traceparent"

// InstrumentationName names Harvest's tracer.
const InstrumentationName = "github.com/harvest-engine/harvest"

// Span attribute keys Harvest sets.
const (
	AttrWorkflow     = attribute.Key("harvest.workflow")
	AttrExecutionID  = attribute.Key("harvest.execution_id")
	AttrCommandID    = attribute.Key("harvest.command_id")
	AttrCommandKind  = attribute.Key("harvest.command.kind")
	AttrDeduplicated = attribute.Key("harvest.deduplicated")
	// AttrDedupLayer says which layer short-circuited a duplicate:
	// "replay" (ingest answered from the stored outcome, nothing
	// published), "broker" (JetStream's Nats-Msg-Id window) or "claim"
	// (the scheduler found the key claimed).
	AttrDedupLayer = attribute.Key("harvest.dedup.layer")
	AttrActivity   = attribute.Key("harvest.activity")
	AttrAttempt    = attribute.Key("harvest.activity.attempt")
	AttrTaskID     = attribute.Key("harvest.workflow_task.id")
	// AttrEager marks an activity attempt a worker ran at once, within
	// the workflow task that scheduled it.
	AttrEager       = attribute.Key("harvest.activity.eager")
	AttrShard       = attribute.Key("harvest.shard")
	AttrBatchSize   = attribute.Key("harvest.batch.size")
	AttrOutcome     = attribute.Key("harvest.outcome")
	AttrHTTPStatus  = attribute.Key("http.response.status_code")
	AttrHTTPRoute   = attribute.Key("http.route")
	AttrHTTPMethod  = attribute.Key("http.request.method")
	AttrErrorCode   = attribute.Key("harvest.error")
	AttrIdempotency = attribute.Key("harvest.idempotency_key.present")
)

// Tracing is a process's tracer and the propagator that carries its
// context in HTTP and NATS headers. A nil *Tracing is tracing off.
type Tracing struct {
	provider trace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	shutdown func(context.Context) error
}

// New traces with tp (a test's provider over an in-memory exporter, or
// the one a user gave their worker). Shutdown does not shut tp down: tp
// is its owner's to flush.
func New(tp trace.TracerProvider) *Tracing {
	return NewWithShutdown(tp, func(context.Context) error { return nil })
}

// NewWithShutdown traces with tp, which the process built for itself,
// and makes Shutdown call shutdown (to flush tp's last spans and stop its
// exporter; otlpsetup.FromEnv).
func NewWithShutdown(tp trace.TracerProvider, shutdown func(context.Context) error) *Tracing {
	return &Tracing{
		provider: tp,
		tracer:   tp.Tracer(InstrumentationName),
		prop:     propagation.TraceContext{},
		shutdown: shutdown,
	}
}

// Provider is the tracer provider spans come from; nil when off.
func (t *Tracing) Provider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.provider
}

// Enabled says whether spans are made.
func (t *Tracing) Enabled() bool { return t != nil }

// Shutdown flushes the spans not yet exported and stops the exporter of
// a tracing made with NewWithShutdown; it does nothing for one made with
// New.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// Start starts a span as a child of ctx's. Off, it returns ctx and a
// span that records nothing.
func (t *Tracing) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.tracer.Start(ctx, name, opts...)
}

// Inject writes ctx's span context into h (traceparent, tracestate).
func (t *Tracing) Inject(ctx context.Context, h nats.Header) {
	if t == nil {
		return
	}
	t.prop.Inject(ctx, headerCarrier(h))
}

// Extract returns ctx with the remote span context h carries, if any.
func (t *Tracing) Extract(ctx context.Context, h nats.Header) context.Context {
	if t == nil || len(h) == 0 {
		return ctx
	}
	return t.prop.Extract(ctx, headerCarrier(h))
}

// ExtractHTTP returns ctx with the remote span context of an HTTP
// request's headers, if any.
func (t *Tracing) ExtractHTTP(ctx context.Context, h map[string][]string) context.Context {
	if t == nil {
		return ctx
	}
	return t.prop.Extract(ctx, propagation.HeaderCarrier(h))
}

// Traceparent returns ctx's span context as a W3C traceparent value, ""
// when it has none. It is how a trace context is stored in PostgreSQL
// (an outbox row, an execution) to be carried later.
func (t *Tracing) Traceparent(ctx context.Context) string {
	if t == nil {
		return ""
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	t.prop.Inject(ctx, c)
	return c[HeaderTraceparent]
}

// FromTraceparent returns ctx with the remote span context of a stored
// traceparent value, if it parses.
func (t *Tracing) FromTraceparent(ctx context.Context, traceparent string) context.Context {
	if t == nil || traceparent == "" {
		return ctx
	}
	return t.prop.Extract(ctx, propagation.MapCarrier{HeaderTraceparent: traceparent})
}

// SetHeader sets the traceparent header of h to a stored value.
func (t *Tracing) SetHeader(h nats.Header, traceparent string) {
	if t == nil || traceparent == "" {
		return
	}
	h.Set(HeaderTraceparent, traceparent)
}

// headerCarrier adapts NATS headers, which keep keys as written, to the
// propagator; W3C names them in lower case.
type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string {
	if v := nats.Header(c).Get(key); v != "" {
		return v
	}
	// A sender that canonicalised the name, as net/http does.
	return nats.Header(c).Get(textproto.CanonicalMIMEHeaderKey(key))
}

func (c headerCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
