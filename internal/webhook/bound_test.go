package webhook

import (
	"encoding/hex"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestVerifyBound: a bound signature verifies for its own request only:
// another run's path, another binding, method or idempotency key, a
// changed body, a stale or future timestamp, a wrong secret or a
// malformed header are refused with ErrBadSignature.
func TestVerifyBound(t *testing.T) {
	secrets := []string{"old-secret", "new-secret"}
	target := Target{Method: "POST", Path: "/v1/runs/0199a3e4-7c4b-7d1a-9c2e-5b6f7a8b9c0d/external/item", IdempotencyKey: "delivery-1"}
	body := []byte(`{"sku": "A-1"}`)
	good := SignBound("new-secret", testNow, target, body)
	h := func(v ...string) http.Header {
		out := http.Header{}
		for _, s := range v {
			out.Add(HeaderHarvestSignature, s)
		}
		return out
	}
	require.NoError(t, VerifyBound(secrets, 0, h(good), target, body, testNow))
	require.NoError(t, VerifyBound(secrets, 0, h(SignBound("old-secret", testNow, target, body)), target, body, testNow), "any secret, for rotation")
	require.NoError(t, VerifyBound(secrets, 0, h(good), target, body, testNow.Add(DefaultTolerance)), "at the edge of the tolerance")
	// A sender rotating its own secret may send both signatures.
	both := good + ",v1=" + hex.EncodeToString(make([]byte, 32)) + ",v2=future-scheme"
	require.NoError(t, VerifyBound(secrets, 0, h(both), target, body, testNow))

	// The signed bytes, spelt out as docs/arcflow.md gives them.
	ts := strconv.FormatInt(testNow.Unix(), 10)
	want := hex.EncodeToString(sign("new-secret", []byte(ts+"\nPOST\n"+target.Path+"\ndelivery-1\n"), body))
	require.Equal(t, "t="+ts+",v1="+want, good)

	other := func(mod func(*Target)) Target {
		c := target
		mod(&c)
		return c
	}
	refused := map[string]struct {
		h      http.Header
		target Target
		body   []byte
		now    time.Time
	}{
		"another run":                 {h(good), other(func(c *Target) { c.Path = "/v1/runs/0199a3e4-0000-7d1a-9c2e-5b6f7a8b9c0d/external/item" }), body, testNow},
		"another binding":             {h(good), other(func(c *Target) { c.Path = strings.Replace(c.Path, "/item", "/approval", 1) }), body, testNow},
		"another key":                 {h(good), other(func(c *Target) { c.IdempotencyKey = "delivery-2" }), body, testNow},
		"no key":                      {h(good), other(func(c *Target) { c.IdempotencyKey = "" }), body, testNow},
		"another method":              {h(good), other(func(c *Target) { c.Method = "PUT" }), body, testNow},
		"a changed body":              {h(good), target, []byte(`{"sku": "B-2"}`), testNow},
		"a key moved into the body":   {h(SignBound("new-secret", testNow, other(func(c *Target) { c.IdempotencyKey = "k" }), []byte("1.5"))), other(func(c *Target) { c.IdempotencyKey = "k\n1" }), []byte(".5"), testNow},
		"stale":                       {h(good), target, body, testNow.Add(DefaultTolerance + time.Second)},
		"from the future":             {h(good), target, body, testNow.Add(-DefaultTolerance - time.Second)},
		"a wrong secret":              {h(SignBound("other", testNow, target, body)), target, body, testNow},
		"no header":                   {h(), target, body, testNow},
		"empty header":                {h(""), target, body, testNow},
		"repeated header":             {h(good, good), target, body, testNow},
		"no t":                        {h("v1=" + want), target, body, testNow},
		"no v1":                       {h("t=" + ts), target, body, testNow},
		"t twice":                     {h("t=" + ts + ",t=" + ts + ",v1=" + want), target, body, testNow},
		"t with a leading zero":       {h("t=0" + ts + ",v1=" + want), target, body, testNow},
		"t with a sign":               {h("t=+" + ts + ",v1=" + want), target, body, testNow},
		"v1 not hex":                  {h("t=" + ts + ",v1=zz"), target, body, testNow},
		"v1 short":                    {h("t=" + ts + ",v1=" + want[:62]), target, body, testNow},
		"an item without =":           {h(good + ",junk"), target, body, testNow},
		"the old body-only signature": {http.Header{"X-Arcflow-Signature": {"sha256=" + hex.EncodeToString(sign("new-secret", body))}}, target, body, testNow},
	}
	for name, c := range refused {
		err := VerifyBound(secrets, 0, c.h, c.target, c.body, c.now)
		require.ErrorIs(t, err, ErrBadSignature, name)
	}
	require.ErrorIs(t, VerifyBound(nil, 0, h(good), target, body, testNow), ErrBadSignature, "no secrets")
	require.ErrorIs(t, VerifyBound(secrets, time.Second, h(good), target, body, testNow.Add(2*time.Second)), ErrBadSignature, "a tolerance of its own")
}

// TestTheDocumentedBoundSignatureIsSignBounds: the worked example of
// docs/security.md (and the format docs/arcflow.md gives senders) is what
// SignBound makes, and VerifyBound takes it within the tolerance only.
func TestTheDocumentedBoundSignatureIsSignBounds(t *testing.T) {
	at := time.Unix(1767225600, 0)
	target := Target{Method: "POST", Path: "/v1/runs/0199a3e4-7c4b-7d1a-9c2e-5b6f7a8b9c0d/external/item", IdempotencyKey: "delivery-1"}
	body := []byte(`{"sku": "A-1"}`)
	const header = "t=1767225600,v1=04a2ce0c1463caca41d006b8456219cfd7cb43755d4d6e37fde90ae30d77a1ef"
	require.Equal(t, header, SignBound("new-secret", at, target, body))
	doc, err := os.ReadFile("../../docs/security.md")
	require.NoError(t, err)
	require.Contains(t, string(doc), HeaderHarvestSignature+": "+header)
	h := http.Header{HeaderHarvestSignature: {header}}
	require.NoError(t, VerifyBound([]string{"new-secret"}, 0, h, target, body, at.Add(5*time.Minute)))
	require.ErrorIs(t, VerifyBound([]string{"new-secret"}, 0, h, target, body, at.Add(5*time.Minute+time.Second)), ErrBadSignature)
}
