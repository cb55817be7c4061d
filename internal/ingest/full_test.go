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
)

// TestAFullCommandStreamIsAnswered503: once the command stream holds its
// max bytes (no scheduler applies commands here), a start is answered
// 503 unavailable with Retry-After at once, and every start answered
// before it is still on the stream: nothing accepted is dropped to make
// room.
func TestAFullCommandStreamIsAnswered503(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 1, CommandMaxBytes: broker.MinStreamMaxBytes, MemoryStorage: true})
	require.NoError(t, err)
	s, err := New(Config{Topology: top, NC: nc, OutcomeWait: 50 * time.Millisecond, DeclaredWorkflows: []string{"w"}})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	e := &edge{t: t, s: s, top: top}

	input, err := json.Marshal(strings.Repeat("x", 200<<10))
	require.NoError(t, err)
	body := `{"input": ` + string(input) + `}`
	accepted := 0
	for range 100 {
		req := httptest.NewRequest(http.MethodPost, "http://localhost/api/harvest/workflows/w/start", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		began := time.Now()
		s.Handler().ServeHTTP(rec, req)
		if rec.Code == http.StatusAccepted {
			accepted++
			continue
		}
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
		var a api.ErrorResponse
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &a))
		require.Equal(t, api.CodeUnavailable, a.Error)
		require.NotEmpty(t, rec.Header().Get("Retry-After"))
		require.Less(t, time.Since(began), DefaultPublishTimeout, "refused at once, not after the publish timeout")
		break
	}
	require.Positive(t, accepted)
	require.Less(t, accepted, 100, "the stream filled")
	require.EqualValues(t, accepted, e.published(), "every accepted start is on the stream")
}
