package client_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
)

// The token in Config is sent as the bearer token of every request, and
// the deprecated WithToken option still does the same.
func TestTheTokenIsSentAsTheBearer(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"workers":[]}`))
	}))
	t.Cleanup(srv.Close)

	c, err := client.New(client.Config{BaseURL: srv.URL, Token: " t-ops "})
	require.NoError(t, err)
	_, err = c.Workers(t.Context())
	require.NoError(t, err)
	old, err := client.New(client.Config{BaseURL: srv.URL}, client.WithToken("t-old")) //nolint:staticcheck // SA1019: the deprecated form's own test.
	require.NoError(t, err)
	_, err = old.Workers(t.Context())
	require.NoError(t, err)
	none, err := client.New(client.Config{BaseURL: srv.URL})
	require.NoError(t, err)
	_, err = none.Workers(t.Context())
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"Bearer t-ops", "Bearer t-old", ""}, seen)
}
