package client

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// sentinels are the Err sentinels of one code each, with the status and
// code their documentation names.
var sentinels = []struct {
	err    error
	status int
	code   string
}{
	{ErrExecutionNotFound, http.StatusNotFound, "execution_not_found"},
	{ErrCommandNotFound, http.StatusNotFound, "command_not_found"},
	{ErrDeadCommandNotFound, http.StatusNotFound, "dead_command_not_found"},
	{ErrStateNotFound, http.StatusNotFound, "state_not_found"},
	{ErrScheduleNotFound, http.StatusNotFound, "schedule_not_found"},
	{ErrExecutionTerminal, http.StatusConflict, "execution_terminal"},
	{ErrWorkflowIDConflict, http.StatusConflict, "workflow_id_conflict"},
	{ErrIdempotencyKeyReused, http.StatusUnprocessableEntity, "idempotency_key_reused"},
	{ErrInputInvalid, http.StatusUnprocessableEntity, "input_invalid"},
	{ErrCallbackRejected, http.StatusUnprocessableEntity, "callback_rejected"},
	{ErrCommandRejected, http.StatusUnprocessableEntity, "command_rejected"},
	{ErrPayloadUnstorable, http.StatusBadRequest, "payload_unstorable"},
	{ErrUnknownField, http.StatusBadRequest, "unknown_field"},
	{ErrUnknownParameter, http.StatusBadRequest, "unknown_parameter"},
	{ErrPayloadTooLarge, http.StatusRequestEntityTooLarge, "payload_too_large"},
	{ErrCommandTooLarge, http.StatusRequestEntityTooLarge, "command_too_large"},
	{ErrAdmissionBlocked, http.StatusServiceUnavailable, "admission_blocked"},
	{ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
}

func TestSentinelsMatchTheirCodeOnly(t *testing.T) {
	for _, s := range sentinels {
		var sentinel *APIError
		require.ErrorAs(t, s.err, &sentinel)
		require.Equal(t, s.status, sentinel.StatusCode, s.code)
		require.Equal(t, s.code, sentinel.Code)
		require.NotEmpty(t, sentinel.Message, s.code)

		// An answer with the code matches, wrapped or not, whatever its
		// message; so do ErrNotFound and ErrConflict by its status.
		answer := apiErrorFrom(s.status, nil, []byte(`{"error":"`+s.code+`","message":"as the server words it"}`))
		wrapped := fmt.Errorf("charge order 7: %w", answer)
		for _, err := range []error{answer, wrapped} {
			require.ErrorIs(t, err, s.err)
			require.Equal(t, s.status == http.StatusNotFound, errors.Is(err, ErrNotFound), s.code)
			require.Equal(t, s.status == http.StatusConflict, errors.Is(err, ErrConflict), s.code)
			for _, other := range sentinels {
				if other.code != s.code {
					require.NotErrorIs(t, err, other.err, "%s is not %s", s.code, other.code)
				}
			}
		}
		require.Equal(t, s.status == http.StatusNotFound, errors.Is(s.err, ErrNotFound), "the sentinel itself")
	}
}

func TestAPIErrorIs(t *testing.T) {
	unavailable := apiErrorFrom(http.StatusServiceUnavailable, http.Header{"Retry-After": {"1"}}, []byte(`{"error":"unavailable","message":"m"}`))
	// A target with no code matches on the status.
	require.ErrorIs(t, unavailable, &APIError{StatusCode: http.StatusServiceUnavailable})
	require.NotErrorIs(t, unavailable, &APIError{StatusCode: http.StatusBadGateway})
	require.NotErrorIs(t, unavailable, &APIError{})
	require.NotErrorIs(t, unavailable, (*APIError)(nil))
	require.NotErrorIs(t, unavailable, errors.New("unavailable"))
	// An answer that is not the API's JSON has no code: no code sentinel
	// matches it.
	gateway := apiErrorFrom(http.StatusServiceUnavailable, nil, []byte("<html>down</html>"))
	require.NotErrorIs(t, gateway, ErrUnavailable)
	require.ErrorIs(t, gateway, &APIError{StatusCode: http.StatusServiceUnavailable})
}

func TestAPIErrorCarriesTheAnswer(t *testing.T) {
	e := apiErrorFrom(http.StatusRequestEntityTooLarge, http.Header{"Retry-After": {"7"}},
		[]byte(`{"error":"payload_too_large","message":"m","field":"input","limit":1024,"pointer":"/input","violations":[{"field":"/a","message":"x"}]}`))
	require.Equal(t, &APIError{StatusCode: http.StatusRequestEntityTooLarge, Code: CodePayloadTooLarge, Message: "m", Field: "input", Limit: 1024,
		Pointer: "/input", Violations: []Violation{{Field: "/a", Message: "x"}}, RetryAfter: 7e9}, e)
	require.EqualError(t, e, "payload_too_large: m")
}
