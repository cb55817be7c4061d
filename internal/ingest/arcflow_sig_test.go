package ingest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/webhook"
)

// TestArcFlowBodyOnlySignaturesOnlyWhenConfigured: a callback signed
// over its body alone (X-ArcFlow-Signature) is refused, with a message
// that says how to sign, unless Config.ArcFlowLegacyBodyOnly takes it; a
// bound X-Harvest-Signature is taken either way, and one that fails is
// refused either way (the legacy scheme is no fallback for it). A
// refused callback publishes nothing.
func TestArcFlowBodyOnlySignaturesOnlyWhenConfigured(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 2, MemoryStorage: true})
	require.NoError(t, err)
	_, err = New(Config{Topology: top, NC: nc, ArcFlowLegacyBodyOnly: true})
	require.ErrorContains(t, err, "ArcFlowLegacyBodyOnly without ArcFlowSecrets")

	server := func(legacy bool) *Server {
		s, err := New(Config{Topology: top, NC: nc, OutcomeWait: 50 * time.Millisecond, ArcFlowSecrets: []string{testArcFlowSecret}, ArcFlowLegacyBodyOnly: legacy})
		require.NoError(t, err)
		require.NoError(t, s.Start(ctx))
		t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
		return s
	}
	strict, legacy := server(false), server(true)
	e := &edge{t: t, top: top}
	const (
		path = "/v1/runs/" + testExecutionID + "/external/approval"
		body = `{"approved": true}`
	)
	post := func(s *Server, header, value string) (int, api.ErrorResponse) {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Idempotency-Key", "delivery-1")
		req.Header.Set(header, value)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		var a api.ErrorResponse
		if rec.Code >= 400 {
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &a), "%d %s", rec.Code, rec.Body)
		}
		return rec.Code, a
	}
	bodyOnly := "sha256=" + sign(testArcFlowSecret, body)
	target := webhook.Target{Method: http.MethodPost, Path: path, IdempotencyKey: "delivery-1"}
	bound := webhook.SignBound(testArcFlowSecret, time.Now(), target, []byte(body))
	stale := webhook.SignBound(testArcFlowSecret, time.Now().Add(-time.Hour), target, []byte(body))

	status, a := post(strict, HeaderArcFlowSignature, bodyOnly)
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, api.CodeInvalidSignature, a.Error)
	require.Contains(t, a.Message, webhook.HeaderHarvestSignature)
	for _, s := range []*Server{strict, legacy} {
		status, a = post(s, webhook.HeaderHarvestSignature, stale)
		require.Equal(t, http.StatusUnauthorized, status, "a stale signature: %+v", a)
	}
	require.Zero(t, e.published(), "nothing refused is published")

	status, a = post(legacy, HeaderArcFlowSignature, bodyOnly)
	require.Equal(t, http.StatusAccepted, status, "%+v", a)
	status, a = post(strict, webhook.HeaderHarvestSignature, bound)
	require.Equal(t, http.StatusAccepted, status, "%+v", a)
	status, a = post(legacy, webhook.HeaderHarvestSignature, bound)
	require.Equal(t, http.StatusAccepted, status, "%+v", a)
}
