package ingest_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

const testMaxBodyBytes = 4 << 10

// TestClientErrorsAgainstAServer: the errors a whole Harvest answers are
// the client's *APIError, matched by errors.Is with the sentinel of their
// code, with ErrNotFound or ErrConflict by their status, and by no other
// sentinel.
func TestClientErrorsAgainstAServer(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{
		// Several stacks share two cores under -race: wait long before
		// answering 202.
		Ingest: ingest.Config{OutcomeWait: 30 * time.Second, MaxBodyBytes: testMaxBodyBytes,
			IdempotencyFingerprint: ingest.FingerprintReject},
	})
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	c, err := client.New(client.Config{BaseURL: s.URL(), HTTPClient: &http.Client{Transport: tr, Timeout: time.Minute}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	in := examples.ChargeInput{AmountCents: 500, CustomerID: "cus_1"}

	t.Run("execution_not_found", func(t *testing.T) {
		_, err := c.Describe(ctx, uuid.NewString())
		requireSentinel(t, err, client.ErrExecutionNotFound, http.StatusNotFound)
		err = c.SendSignal(ctx, uuid.NewString(), "item", 1)
		requireSentinel(t, err, client.ErrExecutionNotFound, http.StatusNotFound)
	})
	t.Run("command_not_found", func(t *testing.T) {
		_, err := c.Command(ctx, uuid.NewString())
		requireSentinel(t, err, client.ErrCommandNotFound, http.StatusNotFound)
	})
	t.Run("dead_command_not_found", func(t *testing.T) {
		_, err := c.DeadCommand(ctx, 1<<40)
		requireSentinel(t, err, client.ErrDeadCommandNotFound, http.StatusNotFound)
	})
	t.Run("execution_terminal", func(t *testing.T) {
		run, err := c.Start(ctx, examples.WorkflowCollect, examples.CollectInput{Count: 1}, client.StartOptions{})
		require.NoError(t, err)
		require.NoError(t, c.SendSignal(ctx, run.ExecutionID, "item", 1))
		_, err = c.WaitResult(ctx, run.ExecutionID, nil)
		require.NoError(t, err)
		err = c.SendSignal(ctx, run.ExecutionID, "item", 2)
		requireSentinel(t, err, client.ErrExecutionTerminal, http.StatusConflict)
	})
	t.Run("workflow_id_conflict", func(t *testing.T) {
		opts := client.StartOptions{WorkflowID: "errs-order-1", ReusePolicy: client.ReuseRejectDuplicate}
		_, err := c.Start(ctx, examples.WorkflowCharge, in, opts)
		require.NoError(t, err)
		_, err = c.Start(ctx, examples.WorkflowCharge, in, opts)
		requireSentinel(t, err, client.ErrWorkflowIDConflict, http.StatusConflict)
	})
	t.Run("idempotency_key_reused", func(t *testing.T) {
		opts := client.StartOptions{IdempotencyKey: "errs-key-1"}
		_, err := c.Start(ctx, examples.WorkflowCharge, in, opts)
		require.NoError(t, err)
		_, err = c.Start(ctx, examples.WorkflowCharge, examples.ChargeInput{AmountCents: 501, CustomerID: "cus_1"}, opts)
		requireSentinel(t, err, client.ErrIdempotencyKeyReused, http.StatusUnprocessableEntity)
	})
	t.Run("input_invalid", func(t *testing.T) {
		_, err := c.Start(ctx, examples.WorkflowCharge, map[string]any{"amount_cents": 0}, client.StartOptions{})
		apiErr := requireSentinel(t, err, client.ErrInputInvalid, http.StatusUnprocessableEntity)
		require.NotEmpty(t, apiErr.Violations)
		require.Equal(t, "input", apiErr.Field)
	})
	t.Run("callback_rejected", func(t *testing.T) {
		_, err := c.Start(ctx, examples.WorkflowCharge, in, client.StartOptions{CompletionCallback: "http://127.0.0.1:9/done"})
		apiErr := requireSentinel(t, err, client.ErrCallbackRejected, http.StatusUnprocessableEntity)
		require.Equal(t, "completion_callback", apiErr.Field)
	})
	t.Run("payload_unstorable", func(t *testing.T) {
		_, err := c.Start(ctx, examples.WorkflowCharge, map[string]any{"amount_cents": 1, "customer_id": "c\x00"}, client.StartOptions{})
		apiErr := requireSentinel(t, err, client.ErrPayloadUnstorable, http.StatusBadRequest)
		require.Equal(t, "/input/customer_id", apiErr.Pointer)
	})
	t.Run("payload_too_large", func(t *testing.T) {
		big := examples.ChargeInput{AmountCents: 1, CustomerID: strings.Repeat("c", testMaxBodyBytes)}
		_, err := c.Start(ctx, examples.WorkflowCharge, big, client.StartOptions{})
		apiErr := requireSentinel(t, err, client.ErrPayloadTooLarge, http.StatusRequestEntityTooLarge)
		require.Equal(t, int64(testMaxBodyBytes), apiErr.Limit)
	})
	t.Run("unavailable", func(t *testing.T) {
		// An ingest with no database to read from.
		api, err := ingest.New(ingest.Config{Topology: s.Topology, NC: s.NC()})
		require.NoError(t, err)
		require.NoError(t, api.Start(ctx))
		t.Cleanup(func() { require.NoError(t, api.Stop(context.Background())) })
		srv := httptest.NewServer(api.Handler())
		t.Cleanup(srv.Close)
		bare, err := client.New(client.Config{BaseURL: srv.URL})
		require.NoError(t, err)
		_, err = bare.Describe(ctx, uuid.NewString())
		requireSentinel(t, err, client.ErrUnavailable, http.StatusServiceUnavailable)
	})
	t.Run("admission_blocked", func(t *testing.T) {
		post := func(path, body string) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+path, strings.NewReader(body))
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, http.StatusOK, resp.StatusCode, path)
		}
		post("/api/harvest/admission/"+examples.WorkflowOnboarding+"/close", `{"reason": "errs test"}`)
		t.Cleanup(func() { post("/api/harvest/admission/"+examples.WorkflowOnboarding+"/open", "") })
		_, err := c.Start(ctx, examples.WorkflowOnboarding, nil, client.StartOptions{})
		apiErr := requireSentinel(t, err, client.ErrAdmissionBlocked, http.StatusServiceUnavailable)
		require.Equal(t, 30*time.Second, apiErr.RetryAfter)
	})
}

// allSentinels are the client's sentinels of one code each.
var allSentinels = []error{
	client.ErrExecutionNotFound, client.ErrCommandNotFound, client.ErrDeadCommandNotFound,
	client.ErrExecutionTerminal, client.ErrWorkflowIDConflict,
	client.ErrIdempotencyKeyReused, client.ErrInputInvalid, client.ErrCallbackRejected, client.ErrCommandRejected,
	client.ErrPayloadUnstorable, client.ErrUnknownField, client.ErrUnknownParameter, client.ErrPayloadTooLarge, client.ErrCommandTooLarge,
	client.ErrAdmissionBlocked, client.ErrUnavailable,
}

// requireSentinel requires that err is an *APIError of status that
// matches sentinel and no other sentinel of a code, and returns it.
func requireSentinel(t *testing.T, err error, sentinel error, status int) *client.APIError {
	t.Helper()
	var apiErr *client.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, status, apiErr.StatusCode, apiErr.Error())
	require.NotEmpty(t, apiErr.Message)
	require.ErrorIs(t, err, sentinel)
	var want *client.APIError
	require.ErrorAs(t, sentinel, &want)
	require.Equal(t, want.Code, apiErr.Code)
	require.Equal(t, status == http.StatusNotFound, errors.Is(err, client.ErrNotFound))
	require.Equal(t, status == http.StatusConflict, errors.Is(err, client.ErrConflict))
	for _, other := range allSentinels {
		if other != sentinel {
			require.NotErrorIs(t, err, other)
		}
	}
	return apiErr
}
