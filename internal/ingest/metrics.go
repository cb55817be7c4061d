package ingest

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/tracing"
	"github.com/harvest-engine/harvest/internal/wire"
)

// metrics are ingest's, on the registry given in Config. Labels take
// values from fixed sets (routes, status codes, command kinds, results,
// the configured webhook sources), never from what a request names.
type metrics struct {
	starts       *prometheus.CounterVec
	duplicates   *prometheus.CounterVec
	hooksIgnored prometheus.Counter
	lost         prometheus.Counter
	refused      *prometheus.CounterVec

	requests        *prometheus.CounterVec   // route, code
	requestSeconds  *prometheus.HistogramVec // route
	inFlight        prometheus.Gauge
	signals         *prometheus.CounterVec // result
	webhooks        *prometheus.CounterVec // source, result
	hooksRefused    *prometheus.CounterVec // source, reason
	publishSeconds  *prometheus.HistogramVec
	publishFailures *prometheus.CounterVec // kind, reason
}

// Results of a signal, the result label of harvest_ingest_signals_total.
const (
	signalDelivered    = "delivered"
	signalDeduplicated = "deduplicated"
	signalAccepted     = "accepted"
	signalRefused      = "refused"
	signalUnavailable  = "unavailable"
)

// Results of a webhook delivery, the result label of
// harvest_ingest_webhooks_total.
const (
	hookAccepted    = "accepted"
	hookDuplicate   = "duplicate"
	hookIgnored     = "ignored"
	hookUnverified  = "unverified"
	hookRejected    = "rejected"
	hookUnavailable = "unavailable"
)

// Reasons a webhook delivery is refused, the reason label of
// harvest_ingest_webhooks_refused_total: told by the answer's status.
const (
	refusedSignature = "bad_signature"
	refusedSchema    = "schema"
	refusedTooLarge  = "too_large"
	refusedMalformed = "malformed"
)

var refusalReasons = []string{refusedSignature, refusedSchema, refusedTooLarge, refusedMalformed}

// refusalReason is the reason of a refused delivery answered status.
func refusalReason(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return refusedSignature
	case http.StatusUnprocessableEntity:
		return refusedSchema
	case http.StatusRequestEntityTooLarge:
		return refusedTooLarge
	default:
		return refusedMalformed
	}
}

// otherSource is the source label of a delivery to a source that is not
// configured.
const otherSource = "other"

// Reasons a publish fails, the reason label of
// harvest_ingest_publish_failures_total.
const (
	publishTooLarge    = "too_large"
	publishUnavailable = "unavailable"
)

var commandKinds = []string{wire.KindStart, wire.KindSignal, wire.KindSignalWithStart, wire.KindCancel}

func newMetrics(reg prometheus.Registerer, sources []string) (*metrics, error) {
	m := &metrics{
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_ingest_starts_total",
			Help: "Start requests answered, by result: started_fresh, deduplicated, existing, accepted (202), refused.",
		}, []string{"result"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_ingest_start_duplicates_total",
			Help: "Duplicate starts caught, by layer: broker (PubAck.Duplicate) or claim (a replay answered from a PostgreSQL claim).",
		}, []string{"layer"}),
		hooksIgnored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "harvest_ingest_webhooks_ignored_total",
			Help: "Verified webhook events that no routing rule names.",
		}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "harvest_ingest_lost_commands_total",
			Help: "Retries of a command whose first message left the command stream unapplied, accepted again.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_ingest_requests_refused_total",
			Help: "API requests refused before they were read, by reason: unauthenticated (401), forbidden (403), overloaded (503: max_in_flight, or the budget of requests without a token, reached), slow_body (408: the body of a request without a token did not arrive within its deadline), host_not_allowed (421: a Host the API does not answer), cross_site (403: a browser's request from another site).",
		}, []string{"reason"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_ingest_http_requests_total",
			Help: `HTTP requests answered, by route (the pattern that served it, "POST /api/harvest/workflows/{name}/start"; "/" for no route) and status code.`,
		}, []string{"route", "code"}),
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "harvest_ingest_http_request_duration_seconds",
			Help:    "How long ingest took to answer an HTTP request, by route: from its headers read to its answer written.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"route"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "harvest_ingest_http_requests_in_flight",
			Help: "HTTP requests being served now (refusals for overload included).",
		}),
		signals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_ingest_signals_total",
			Help: "Signals published (signal, signal-with-start, ArcFlow external callbacks), by result: delivered, deduplicated (a keyed signal delivered before), accepted (202: outcome not known yet), refused (the scheduler refused it: no such execution, closed), unavailable (the command stream did not take it: harvest_ingest_publish_failures_total says why).",
		}, []string{"result"}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_ingest_webhooks_total",
			Help: "Webhook deliveries, by source (other: not configured) and result: accepted, duplicate, ignored (no rule), unverified (bad signature: 401), rejected (another 4xx), unavailable (503: the command stream, or a closed admission gate).",
		}, []string{"source", "result"}),
		hooksRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_ingest_webhooks_refused_total",
			Help: "Webhook deliveries to a configured source that were refused (unverified or rejected in harvest_ingest_webhooks_total), by source and reason: bad_signature (401), schema (422: the source's payload schema or the workflow's input schema), too_large (413), malformed (another 4xx).",
		}, []string{"source", "reason"}),
		publishSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "harvest_ingest_publish_duration_seconds",
			Help:    "How long publishing a command to the command stream took, until JetStream acknowledged it or the publish failed, by command kind (retries within the publish timeout included).",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
		}, []string{"kind"}),
		publishFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_ingest_publish_failures_total",
			Help: "Commands the command stream did not accept, by kind and reason: too_large (more than NATS carries: 413), unavailable (JetStream down or unreachable within the publish timeout: 503).",
		}, []string{"kind", "reason"}),
	}
	for _, c := range []prometheus.Collector{m.starts, m.duplicates, m.hooksIgnored, m.lost, m.refused,
		m.requests, m.requestSeconds, m.inFlight, m.signals, m.webhooks, m.hooksRefused, m.publishSeconds, m.publishFailures} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every series from the start, so that rates and dashboards see zeros
	// rather than nothing.
	for _, r := range []string{"started_fresh", "deduplicated", "existing", "accepted", "deferred", "refused"} {
		m.starts.WithLabelValues(r)
	}
	m.duplicates.WithLabelValues("broker")
	m.duplicates.WithLabelValues("claim")
	m.refused.WithLabelValues("unauthenticated")
	m.refused.WithLabelValues("forbidden")
	m.refused.WithLabelValues("overloaded")
	m.refused.WithLabelValues(refusedSlowBody)
	for _, r := range []string{signalDelivered, signalDeduplicated, signalAccepted, signalRefused, signalUnavailable} {
		m.signals.WithLabelValues(r)
	}
	for _, src := range append(sources, otherSource) {
		for _, r := range []string{hookAccepted, hookDuplicate, hookIgnored, hookUnverified, hookRejected, hookUnavailable} {
			m.webhooks.WithLabelValues(src, r)
		}
	}
	for _, src := range sources {
		for _, r := range refusalReasons {
			m.hooksRefused.WithLabelValues(src, r)
		}
	}
	for _, k := range commandKinds {
		m.publishSeconds.WithLabelValues(k)
		m.publishFailures.WithLabelValues(k, publishTooLarge)
		m.publishFailures.WithLabelValues(k, publishUnavailable)
	}
	return m, nil
}

// counted is the value of a counter of this process.
func counted(c prometheus.Counter) int64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil || m.GetCounter() == nil {
		return 0
	}
	return int64(m.GetCounter().GetValue())
}

// published records a publish of a command of kind that took d and
// failed with err, if not nil.
func (m *metrics) published(kind string, d time.Duration, err error) {
	m.publishSeconds.WithLabelValues(kind).Observe(d.Seconds())
	if err == nil {
		return
	}
	reason := publishUnavailable
	var big *broker.TooLargeError
	if errors.As(err, &big) || errors.Is(err, nats.ErrMaxPayload) {
		reason = publishTooLarge
	}
	m.publishFailures.WithLabelValues(kind, reason).Inc()
}

// instrument counts the requests next serves, by the route that served
// them (the ServeMux sets it on the request it is handed, which next
// passes on), and times them.
func (s *Server) instrument(next http.Handler) http.Handler {
	tr := s.cfg.Topology.Tracing
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		s.metrics.inFlight.Inc()
		rec := &statusRecorder{ResponseWriter: w}
		var span trace.Span
		if tr.Enabled() {
			// The request's span: a child of the caller's trace context
			// (traceparent), or a new trace. Its context goes on with the
			// command into the scheduler and the workers.
			ctx := tr.ExtractHTTP(r.Context(), r.Header)
			ctx, span = tr.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(tracing.AttrHTTPMethod.String(r.Method)))
			r = r.WithContext(ctx) // the mux sets the pattern on this request
		}
		defer func() {
			s.metrics.inFlight.Dec()
			route := r.Pattern
			if route == "" {
				// Answered before it was routed (too many in flight).
				_, route = s.mux.Handler(r)
			}
			code := rec.code()
			s.metrics.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
			s.metrics.requestSeconds.WithLabelValues(route).Observe(time.Since(began).Seconds())
			if span != nil {
				span.SetName(route)
				span.SetAttributes(tracing.AttrHTTPRoute.String(route), tracing.AttrHTTPStatus.Int(code))
				if code >= 500 {
					span.SetStatus(codes.Error, http.StatusText(code))
				}
				span.End()
			}
		}()
		next.ServeHTTP(rec, r)
	})
}

// duplicate counts a duplicate short-circuited by layer ("broker",
// "claim") and says so on the request's span.
func (s *Server) duplicate(ctx context.Context, layer string) {
	s.metrics.duplicates.WithLabelValues(layer).Inc()
	if s.cfg.Topology.Tracing.Enabled() {
		trace.SpanFromContext(ctx).SetAttributes(tracing.AttrDedupLayer.String(layer))
	}
}

// traceAnswer sets what a start or signal came to on the request's span:
// its workflow, execution and whether it was a duplicate.
func (s *Server) traceAnswer(ctx context.Context, workflow string, body any) {
	if !s.cfg.Topology.Tracing.Enabled() {
		return
	}
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(tracing.AttrWorkflow.String(workflow))
	switch b := body.(type) {
	case api.StartResponse:
		span.SetAttributes(tracing.AttrExecutionID.String(b.ExecutionID))
		if b.Deduplicated != nil {
			span.SetAttributes(tracing.AttrDeduplicated.Bool(*b.Deduplicated))
		}
	case api.AcceptedResponse:
		span.SetAttributes(tracing.AttrCommandID.String(b.CommandID))
	case api.ErrorResponse:
		span.SetAttributes(tracing.AttrErrorCode.String(b.Error))
	}
}

// statusRecorder notes the status of the answer written through it.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap is the writer it wraps, for http.ResponseController and
// http.MaxBytesReader (see unwrapWriter).
func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// code is the status written; 200 for an answer with nothing written.
func (w *statusRecorder) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// unwrapWriter is the server's own ResponseWriter under the wrappers w
// may be: http.MaxBytesReader, handed that one, makes the server close
// the connection of a request whose body it cut.
func unwrapWriter(w http.ResponseWriter) http.ResponseWriter {
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}
