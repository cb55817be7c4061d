package ingest_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestTheAPIRequiresATokenWithTheRouteScope runs a stack whose API has
// the tokens: no token is 401, a token without the route's scope
// 403, a token limited to charge and refund cannot see an onboarding
// execution (404), and the right token gets the usual answers. A refused
// request publishes nothing.
func TestTheAPIRequiresATokenWithTheRouteScope(t *testing.T) {
	a, err := auth.New([]auth.Token{
		{Name: "billing-service", SHA256: auth.Hash("t-billing"), Scopes: []auth.Scope{auth.ScopeStart, auth.ScopeSignal, auth.ScopeRead}, Workflows: []string{"charge", "refund"}},
		{Name: "reader", SHA256: auth.Hash("t-reader"), Scopes: []auth.Scope{auth.ScopeRead}},
		{Name: "ops", SHA256: auth.Hash("t-ops"), Scopes: []auth.Scope{auth.ScopeAdmin}},
		{Name: "charge-ops", SHA256: auth.Hash("t-charge-ops"), Scopes: []auth.Scope{auth.ScopeCancel, auth.ScopeRead}, Workflows: []string{"charge"}},
	})
	require.NoError(t, err)
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{Auth: a}})
	ctx := natstest.Context(t)
	js, err := jetstream.New(s.NC())
	require.NoError(t, err)
	commands := func() uint64 {
		st, err := js.Stream(ctx, broker.CommandStream)
		require.NoError(t, err)
		info, err := st.Info(ctx)
		require.NoError(t, err)
		return info.State.LastSeq
	}
	send := func(method, path, token, body string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, s.URL()+path, strings.NewReader(body))
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, resp.Header, string(data)
	}
	start := "/api/harvest/workflows/onboarding/start"
	input := `{"input": {"user_id": 1}}`

	// No token, a malformed header, an unknown token: 401, nothing sent.
	before := commands()
	status, h, body := send(http.MethodPost, start, "", input)
	require.Equal(t, http.StatusUnauthorized, status, body)
	require.Equal(t, `Bearer realm="harvest"`, h.Get("WWW-Authenticate"))
	require.JSONEq(t, `{"error": "unauthenticated", "message": "no Authorization header: send Authorization: Bearer <token>"}`, body)
	for _, header := range []string{"Basic b3BzOm9wcw==", "Bearer", "Bearer t-nobody"} {
		status, h, body = send(http.MethodPost, start, header, input)
		require.Equal(t, http.StatusUnauthorized, status, "%s: %s", header, body)
		require.Equal(t, `Bearer realm="harvest", error="invalid_token"`, h.Get("WWW-Authenticate"), header)
		require.Contains(t, body, `"error":"unauthenticated"`)
	}
	// A token without the scope: 403 naming the token and the scope.
	status, _, body = send(http.MethodPost, start, "Bearer t-reader", input)
	require.Equal(t, http.StatusForbidden, status)
	require.JSONEq(t, `{"error": "forbidden", "message": "token \"reader\" lacks scope start"}`, body)
	// A token limited to other workflows: 403.
	status, _, body = send(http.MethodPost, start, "Bearer t-billing", input)
	require.Equal(t, http.StatusForbidden, status)
	require.JSONEq(t, `{"error": "forbidden", "message": "token \"billing-service\" is limited to the workflows charge, refund"}`, body)
	require.Equal(t, before, commands(), "a refused request publishes nothing")

	// The right tokens, through the Go client.
	tokenClient := func(token string) *client.Client {
		c, err := client.New(client.Config{BaseURL: s.URL(), Token: token})
		require.NoError(t, err)
		return c
	}
	ops, billing, reader := tokenClient("t-ops"), tokenClient("t-billing"), tokenClient("t-reader")
	anonymous, err := client.New(client.Config{BaseURL: s.URL()})
	require.NoError(t, err)
	_, err = anonymous.List(ctx, client.ListOptions{})
	require.ErrorIs(t, err, client.ErrUnauthenticated)

	onboarding, err := ops.Start(ctx, examples.WorkflowOnboarding, map[string]any{"user_id": 1}, client.StartOptions{IdempotencyKey: "auth-1"})
	require.NoError(t, err)
	charge, err := billing.Start(ctx, examples.WorkflowCharge, examples.ChargeInput{AmountCents: 500, CustomerID: "cus_auth"}, client.StartOptions{IdempotencyKey: "auth-2"})
	require.NoError(t, err)
	_, err = billing.WaitResult(ctx, charge.ExecutionID, nil)
	require.NoError(t, err)
	_, err = ops.WaitResult(ctx, onboarding.ExecutionID, nil)
	require.NoError(t, err)

	// billing-service sees charge, and onboarding not at all, as an
	// execution or as an ArcFlow run.
	_, err = billing.Describe(ctx, onboarding.ExecutionID)
	require.ErrorIs(t, err, client.ErrExecutionNotFound)
	status, _, body = send(http.MethodGet, "/v1/runs/"+onboarding.ExecutionID, "Bearer t-billing", "")
	require.Equal(t, http.StatusNotFound, status, body)
	require.Contains(t, body, `"error":"execution_not_found"`)
	status, _, body = send(http.MethodGet, "/v1/runs/"+charge.ExecutionID, "Bearer t-billing", "")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"status":"Completed"`)
	status, _, body = send(http.MethodGet, "/v1/runs/"+onboarding.ExecutionID, "Bearer t-reader", "")
	require.Equal(t, http.StatusOK, status, body)
	_, err = billing.History(ctx, onboarding.ExecutionID)
	require.ErrorIs(t, err, client.ErrExecutionNotFound)
	err = billing.SendSignal(ctx, onboarding.ExecutionID, "item", map[string]any{"n": 1})
	require.ErrorIs(t, err, client.ErrExecutionNotFound)
	listed, err := billing.List(ctx, client.ListOptions{})
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, charge.ExecutionID, listed[0].ExecutionID)
	listed, err = billing.List(ctx, client.ListOptions{Workflow: examples.WorkflowOnboarding})
	require.NoError(t, err)
	require.Empty(t, listed)
	e, err := billing.Describe(ctx, charge.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, "Completed", e.Status)
	require.Equal(t, "billing-service", e.StartedBy, "the token that started it is recorded")
	e, err = reader.Describe(ctx, onboarding.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, "ops", e.StartedBy)
	cancel := func(token, id string) (int, string) {
		status, _, body := send(http.MethodPost, "/api/harvest/executions/"+id+"/cancel", token, `{"reason": "no"}`)
		return status, body
	}
	status, body = cancel("Bearer t-billing", charge.ExecutionID)
	require.Equal(t, http.StatusForbidden, status, body)
	require.Contains(t, body, `lacks scope cancel`)
	// Terminating takes the cancel scope too, and a token limited to some
	// workflows does not see the others' executions.
	terminate := func(token, id string) (int, string) {
		status, _, body := send(http.MethodPost, "/api/harvest/executions/"+id+"/terminate", token, `{"reason": "no"}`)
		return status, body
	}
	status, body = terminate("Bearer t-billing", charge.ExecutionID)
	require.Equal(t, http.StatusForbidden, status, body)
	require.Contains(t, body, `lacks scope cancel`)
	chargeOps := tokenClient("t-charge-ops")
	_, err = chargeOps.Terminate(ctx, onboarding.ExecutionID, "no")
	require.ErrorIs(t, err, client.ErrExecutionNotFound)
	_, err = chargeOps.Cancel(ctx, onboarding.ExecutionID, "no")
	require.ErrorIs(t, err, client.ErrExecutionNotFound)
	closed, err := chargeOps.Terminate(ctx, charge.ExecutionID, "no")
	require.NoError(t, err)
	require.Equal(t, client.StatusCompleted, closed.Status, "closed already: nothing changes")

	// reader reads everything and changes nothing; ops does everything.
	listed, err = reader.List(ctx, client.ListOptions{})
	require.NoError(t, err)
	require.Len(t, listed, 2)
	_, err = reader.Describe(ctx, onboarding.ExecutionID)
	require.NoError(t, err)
	status, body = cancel("Bearer t-reader", onboarding.ExecutionID)
	require.Equal(t, http.StatusForbidden, status, body)
	_, err = ops.Describe(ctx, charge.ExecutionID)
	require.NoError(t, err)

	// Health needs no token; metrics need metrics (which admin holds,
	// TestMetricsNeedTheMetricsScopeAndAnUnlimitedToken); webhooks answer
	// by their own rules.
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusOK, "/metrics": http.StatusUnauthorized} {
		status, _, body := send(http.MethodGet, path, "", "")
		require.Equal(t, want, status, "%s: %s", path, body)
	}
	status, _, body = send(http.MethodGet, "/metrics", "Bearer t-ops", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `harvest_ingest_requests_refused_total{reason="forbidden"} 5`)
	require.Contains(t, body, `harvest_ingest_requests_refused_total{reason="unauthenticated"} 6`)
	status, _, body = send(http.MethodPost, "/hooks/nowhere", "", "{}")
	require.Equal(t, http.StatusNotFound, status, "webhooks are authenticated by their signatures: %s", body)
	require.Contains(t, body, "unknown_source")
}

// An API without tokens is open, as harvest dev's is.
func TestAnAPIWithoutTokensIsOpen(t *testing.T) {
	s := stacktest.Start(t, devstack.Config{})
	c, err := client.New(client.Config{BaseURL: s.URL()})
	require.NoError(t, err)
	ctx := natstest.Context(t)
	run, err := c.Start(ctx, examples.WorkflowOnboarding, map[string]any{"user_id": 2}, client.StartOptions{})
	require.NoError(t, err)
	e, err := c.Describe(ctx, run.ExecutionID)
	require.NoError(t, err)
	require.Empty(t, e.StartedBy)
	require.NotContains(t, string(e.Raw), "started_by")
}
