package stacktest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
)

// StripeSecret is the signing secret of the Stripe sources of stack
// tests' configurations.
const StripeSecret = "whsec_test_secret"

// StripeSign signs a payload with StripeSecret the way Stripe documents:
// HMAC-SHA256 over "<timestamp>.<payload>", sent as "t=<timestamp>,v1=<hex>".
func StripeSign(payload []byte, at time.Time) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(StripeSecret))
	mac.Write([]byte(ts + "." + string(payload)))
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// Deliver posts payload to webhook source source of s, with the
// Stripe-Signature signature unless it is empty, and returns the answer.
func Deliver(t testing.TB, s *devstack.Stack, source string, payload []byte, signature, contentType string) Answer {
	t.Helper()
	req, err := http.NewRequest("POST", s.URL()+"/hooks/"+source, bytes.NewReader(payload))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	if signature != "" {
		req.Header.Set("Stripe-Signature", signature)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := Answer{Status: resp.StatusCode, Header: resp.Header}
	require.NoError(t, json.Unmarshal(raw, &a.Body), "%s", raw)
	return a
}

// PaymentEvent is a Stripe payment_intent.succeeded event of id, for
// amount cents, whose data.object is a start of charge.
func PaymentEvent(id string, amount int) []byte {
	b, _ := json.Marshal(map[string]any{"id": id, "type": "payment_intent.succeeded",
		"data": map[string]any{"object": map[string]any{"amount_cents": amount, "customer_id": "cus_" + id}}})
	return b
}
