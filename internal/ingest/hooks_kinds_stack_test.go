package ingest_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/webhook"
)

func post(t *testing.T, url string, header map[string]string, body []byte) stacktest.Answer {
	t.Helper()
	return stacktest.Call(t, "POST", url, header, string(body))
}

func mac(secret, msg string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// TestGitHubHMACAndUnsignedSources runs the other source kinds end to end:
// GitHub (delivery id and event type from headers), a generic HMAC sender
// signing "<timestamp>.<body>" in base64, and an explicitly unsigned
// source. Each delivery, sent twice, starts one execution.
func TestGitHubHMACAndUnsignedSources(t *testing.T) {
	t.Parallel()
	rules := []webhook.Rule{
		{Event: "push", Workflow: "collect", InputPointer: "/start"},
		{Event: "user.created", Workflow: "collect", InputPointer: "/start"},
	}
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{Webhooks: []webhook.Endpoint{
		{Source: webhook.Source{Name: "github", Kind: webhook.KindGitHub, Secrets: []string{"gh-secret"}}, Rules: rules},
		{Source: webhook.Source{Name: "partner", Kind: webhook.KindHMAC, Secrets: []string{"partner-secret"},
			Header: "X-Partner-Signature", Encoding: webhook.EncodingBase64, TimestampHeader: "X-Partner-Timestamp"}, Rules: rules},
		{Source: webhook.Source{Name: "internal", Kind: webhook.KindNone, AllowUnsigned: true}, Rules: rules},
	}}})
	body := []byte(`{"start": {"count": 0}}`)

	// GitHub: the id is X-GitHub-Delivery, the type X-GitHub-Event.
	gh := map[string]string{"X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958", "X-GitHub-Event": "push",
		"X-Hub-Signature-256": "sha256=" + hex.EncodeToString(mac("gh-secret", string(body)))}
	require.Equal(t, 202, post(t, s.URL()+"/hooks/github", gh, body).Status)
	require.Equal(t, 200, post(t, s.URL()+"/hooks/github", gh, body).Status, "GitHub's Redeliver sends the same delivery id")
	gh["X-Hub-Signature-256"] = "sha256=" + hex.EncodeToString(mac("other", string(body)))
	require.Equal(t, 401, post(t, s.URL()+"/hooks/github", gh, body).Status)

	// Generic HMAC over "<timestamp>.<body>", base64; the id and type come
	// from the body.
	ev := []byte(`{"id": "usr_evt_1", "type": "user.created", "start": {"count": 0}}`)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	hm := map[string]string{"X-Partner-Timestamp": ts,
		"X-Partner-Signature": base64.StdEncoding.EncodeToString(mac("partner-secret", ts+"."+string(ev)))}
	require.Equal(t, 202, post(t, s.URL()+"/hooks/partner", hm, ev).Status)
	require.Equal(t, 200, post(t, s.URL()+"/hooks/partner", hm, ev).Status)
	old := strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)
	stale := map[string]string{"X-Partner-Timestamp": old,
		"X-Partner-Signature": base64.StdEncoding.EncodeToString(mac("partner-secret", old+"."+string(ev)))}
	require.Equal(t, 401, post(t, s.URL()+"/hooks/partner", stale, ev).Status, "outside the tolerance")

	// Unsigned, allowed explicitly: the same event id is its own key
	// (namespaced by source, so it does not collide with partner's).
	require.Equal(t, 202, post(t, s.URL()+"/hooks/internal", nil, ev).Status)
	require.Equal(t, 200, post(t, s.URL()+"/hooks/internal", nil, ev).Status)

	probe.Until(t, 30*time.Second, "three executions to complete", func() bool {
		return stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE status = 'Completed'`) == 3
	})
	require.Equal(t, 3, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
	for _, key := range []string{"hook:github:72d3162e-cc78-11e3-81ab-4c9367dc0958", "hook:partner:usr_evt_1", "hook:internal:usr_evt_1"} {
		require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE idempotency_key = $1`, key), key)
	}
}
