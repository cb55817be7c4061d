package stacktest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
)

// Client is a client of s's API on a transport of its own, closed when
// the test ends, and a context for its calls, cancelled then too (or
// after two minutes).
func Client(t testing.TB, s *devstack.Stack) (*client.Client, context.Context) {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	c, err := client.New(client.Config{BaseURL: s.URL(), HTTPClient: &http.Client{Transport: tr, Timeout: time.Minute}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return c, ctx
}

// RequireAPIError fails t unless err is a *client.APIError of status and
// code with a message, and returns it.
func RequireAPIError(t testing.TB, err error, status int, code string) *client.APIError {
	t.Helper()
	var apiErr *client.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, status, apiErr.StatusCode, apiErr.Error())
	require.Equal(t, code, apiErr.Code)
	require.NotEmpty(t, apiErr.Message)
	return apiErr
}
