package ingest

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
)

func TestParseSchedule(t *testing.T) {
	s := &Server{cfg: Config{MaxStartDelay: time.Hour}}
	str := func(v string) *string { return &v }

	at, rej := s.parseSchedule(api.StartRequest{})
	require.Nil(t, rej)
	require.Nil(t, at, "no schedule: now")

	before := time.Now().UTC()
	at, rej = s.parseSchedule(api.StartRequest{Delay: str("90s")})
	require.Nil(t, rej)
	require.WithinRange(t, *at, before.Add(90*time.Second), time.Now().UTC().Add(90*time.Second))

	at, rej = s.parseSchedule(api.StartRequest{StartAt: str(before.Add(time.Minute).In(time.FixedZone("x", 3600)).Format(time.RFC3339Nano))})
	require.Nil(t, rej)
	require.Equal(t, time.UTC, at.Location())
	require.True(t, at.Equal(before.Add(time.Minute)))

	for _, c := range []struct {
		name       string
		req        api.StartRequest
		code, want string
	}{
		{"both", api.StartRequest{Delay: str("1s"), StartAt: str("2026-01-01T00:00:00Z")}, api.CodeInvalidSchedule, "delay"},
		{"not a duration", api.StartRequest{Delay: str("soon")}, api.CodeInvalidDelay, "delay"},
		{"negative", api.StartRequest{Delay: str("-1s")}, api.CodeInvalidDelay, "delay"},
		{"too far", api.StartRequest{Delay: str("2h")}, api.CodeInvalidDelay, "delay"},
		{"not a time", api.StartRequest{StartAt: str("tomorrow")}, api.CodeInvalidStartAt, "start_at"},
		{"too far ahead", api.StartRequest{StartAt: str(before.Add(2 * time.Hour).Format(time.RFC3339))}, api.CodeInvalidStartAt, "start_at"},
	} {
		at, rej := s.parseSchedule(c.req)
		require.Nil(t, at, c.name)
		require.NotNil(t, rej, c.name)
		require.Equal(t, http.StatusBadRequest, rej.status, c.name)
		require.Equal(t, c.code, rej.body.Error, c.name)
		require.Equal(t, c.want, rej.body.Field, c.name)
		require.NotEmpty(t, rej.body.Message, c.name)
	}
}
