package ingest

import (
	"context"
	"net/http"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/webhook"
)

// handleListWebhooks is GET /api/harvest/webhooks: the webhook sources
// and bindings this process is configured with, and what it counted of
// their deliveries since it started. The counts are this process's: its
// metrics, which Prometheus sums across the fleet. A token limited to
// some workflows sees the rules that route to them, and the sources and
// bindings that have such a rule.
func (s *Server) handleListWebhooks(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	out := api.ListWebhooksResponse{CountedSince: s.started, Sources: []api.WebhookSource{}, Bindings: []api.BindingSummary{}}
	for _, e := range s.cfg.Webhooks {
		rules, ok := visibleRules(ctx, e.Rules)
		if !ok {
			continue
		}
		n := func(result string) int64 { return counted(s.metrics.webhooks.WithLabelValues(e.Name, result)) }
		why := func(reason string) int64 { return counted(s.metrics.hooksRefused.WithLabelValues(e.Name, reason)) }
		src := api.WebhookSource{Name: e.Name, Kind: e.Kind, MaxBodyBytes: e.MaxBodyBytes, PayloadSchema: e.Schema != nil, Rules: rules,
			Counts: api.WebhookCounts{Accepted: n(hookAccepted), Duplicate: n(hookDuplicate), Ignored: n(hookIgnored),
				Refused: n(hookUnverified) + n(hookRejected), Unavailable: n(hookUnavailable)},
			Refused: api.WebhookRefusals{BadSignature: why(refusedSignature), Schema: why(refusedSchema),
				TooLarge: why(refusedTooLarge), Malformed: why(refusedMalformed)}}
		if src.MaxBodyBytes == 0 {
			src.MaxBodyBytes = DefaultMaxBodyBytes
		}
		out.Sources = append(out.Sources, src)
	}
	if !limited(ctx) {
		out.UnknownSource = counted(s.metrics.webhooks.WithLabelValues(otherSource, hookRejected))
	}
	if s.cfg.Bindings != nil {
		for _, b := range s.cfg.Bindings.Bindings() {
			rules, ok := visibleRules(ctx, b.Rules)
			if !ok {
				continue
			}
			c := s.cfg.Bindings.Counts(b.Name)
			out.Bindings = append(out.Bindings, api.BindingSummary{Name: b.Name, Stream: b.Stream, Subject: b.Subject, Rules: rules,
				Counts: api.BindingCounts{Published: c.Published, Duplicate: c.Duplicate, Ignored: c.Ignored, Retried: c.Retried, DeadLettered: c.DeadLettered}})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// visibleRules are the rules whose workflows the caller sees; ok is false
// when a token limited to some workflows sees none of them.
func visibleRules(ctx context.Context, rules []webhook.Rule) (out []api.RoutingRule, ok bool) {
	out = []api.RoutingRule{}
	for _, r := range rules {
		if sees(ctx, r.Workflow) {
			out = append(out, api.RoutingRule{Event: r.Event, Workflow: r.Workflow, Signal: r.Signal, WorkflowID: r.WorkflowID})
		}
	}
	return out, len(out) > 0 || !limited(ctx)
}
