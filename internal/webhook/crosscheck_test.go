package webhook_test

// Cross-checks of the signature schemes against independent implementations:
// stripe-go's webhook package (which both signs test payloads and validates
// them) and go-github's ValidateSignature. Headers are built here by each
// provider's documented algorithm, never through the package under test, and
// every verdict of Verify is compared with the other implementation's.
//
// stripe-go reads the wall clock (time.Since) when it checks tolerance, so
// the tests that need it run in a synctest bubble: time.Now is then a fake
// clock that Verify is handed and stripe-go reads, and time.Sleep moves it.

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-github/v75/github"
	"github.com/stretchr/testify/require"
	stripe "github.com/stripe/stripe-go/v85"
	stripewebhook "github.com/stripe/stripe-go/v85/webhook"

	"github.com/harvest-engine/harvest/internal/webhook"
)

// hmacSHA256 is HMAC-SHA256(secret, concat(parts)).
func hmacSHA256(secret string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// stripeV1 is Stripe's documented v1 signature, hex encoded: HMAC-SHA256
// keyed by the endpoint secret over "<t>.<body>", t being the header's
// timestamp as sent.
func stripeV1(secret, t string, body []byte) string {
	return hex.EncodeToString(hmacSHA256(secret, []byte(t), []byte("."), body))
}

// stripeSigHeader is a Stripe-Signature header signed by the documented
// algorithm: "t=<unix seconds>,v1=<signature>".
func stripeSigHeader(secret string, ts int64, body []byte) string {
	t := strconv.FormatInt(ts, 10)
	return "t=" + t + ",v1=" + stripeV1(secret, t, body)
}

// gitHubSigHeader is GitHub's documented X-Hub-Signature-256 value:
// "sha256=" + hex(HMAC-SHA256(secret, body)).
func gitHubSigHeader(secret string, body []byte) string {
	return "sha256=" + hex.EncodeToString(hmacSHA256(secret, body))
}

func stripeRequest(sig string) http.Header {
	h := http.Header{}
	h.Set(webhook.HeaderStripeSignature, sig)
	return h
}

func gitHubRequest(sig string) http.Header {
	h := http.Header{}
	h.Set(webhook.HeaderGitHubSignature, sig)
	h.Set(webhook.HeaderGitHubDelivery, "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	h.Set(webhook.HeaderGitHubEvent, "push")
	return h
}

// flipped returns a copy of b with the byte at i changed.
func flipped(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x01
	return c
}

// stripeEventBody is an event as Stripe delivers it, at the API version this
// stripe-go release expects, so that ConstructEvent accepts it.
func stripeEventBody(t *testing.T) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"id":          "evt_1NG8Du2eZvKYlo2CUI79vXWy",
		"object":      "event",
		"api_version": stripe.APIVersion,
		"created":     1686089970,
		"type":        "payment_intent.succeeded",
		"livemode":    false,
		"data": map[string]any{"object": map[string]any{
			"id": "pi_3NG8Du2eZvKYlo2C0lBqZ5Dd", "object": "payment_intent", "amount": 2000, "currency": "usd",
		}},
	})
	require.NoError(t, err)
	return b
}

// sampleBodies are bodies the schemes must sign byte for byte, whatever
// they hold.
func sampleBodies(t *testing.T) map[string][]byte {
	return map[string][]byte{
		"event":         stripeEventBody(t),
		"empty":         {},
		"binary":        {0x00, 0xff, 0xfe, '.', ',', '=', '\n', 0x80},
		"non-ascii":     []byte(`{"name":"Zoë — 東京 🚀"}`),
		"trailing-crlf": []byte("{\"id\":\"evt_1\"}\r\n"),
		"large":         bytes.Repeat([]byte(`{"k":"v"},`), 100_000),
	}
}

// TestStripeGoSignedPayloadsVerify feeds Verify payloads signed by
// stripe-go's GenerateTestSignedPayload.
func TestStripeGoSignedPayloadsVerify(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		body := stripeEventBody(t)
		src := webhook.Source{Name: "stripe", Kind: webhook.KindStripe, Secrets: []string{"whsec_old", "whsec_new"}}
		now := time.Now()
		signed := func(secret string) *stripewebhook.SignedPayload {
			return stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: now})
		}

		// Each configured secret is accepted on its own: rotation.
		for _, secret := range src.Secrets {
			sp := signed(secret)
			require.NoError(t, stripewebhook.ValidatePayload(sp.Payload, sp.Header, secret))
			d, err := webhook.Verify(src, stripeRequest(sp.Header), sp.Payload, now)
			require.NoError(t, err, "header %q", sp.Header)
			require.Equal(t, webhook.Delivery{}, d)

			// The caller reads id and type from the verified body; they are
			// what stripe-go's ConstructEvent makes of the same delivery.
			ev, err := stripewebhook.ConstructEvent(sp.Payload, sp.Header, secret)
			require.NoError(t, err)
			var doc any
			require.NoError(t, json.Unmarshal(sp.Payload, &doc))
			id, err := webhook.Pointer(doc, "/id")
			require.NoError(t, err)
			typ, err := webhook.Pointer(doc, "/type")
			require.NoError(t, err)
			require.Equal(t, ev.ID, id)
			require.Equal(t, string(ev.Type), typ)
		}

		// While Stripe rolls a secret it signs with both, in one header.
		// Either secret alone verifies it.
		v1 := func(sp *stripewebhook.SignedPayload) string {
			_, sig, ok := strings.Cut(sp.Header, ",")
			require.True(t, ok)
			return sig
		}
		rolled := signed("whsec_old").Header + "," + v1(signed("whsec_next"))
		for _, secrets := range [][]string{{"whsec_old"}, {"whsec_next"}, {"whsec_next", "whsec_old"}} {
			s := webhook.Source{Name: "stripe", Kind: webhook.KindStripe, Secrets: secrets}
			_, err := webhook.Verify(s, stripeRequest(rolled), body, now)
			require.NoError(t, err, "secrets %q", secrets)
			for _, secret := range secrets {
				require.NoError(t, stripewebhook.ValidatePayload(body, rolled, secret))
			}
		}

		// A secret that is not configured is refused.
		sp := signed("whsec_unknown")
		_, err := webhook.Verify(src, stripeRequest(sp.Header), sp.Payload, now)
		require.ErrorIs(t, err, webhook.ErrBadSignature)
		require.ErrorContains(t, err, "no secret matched")
		require.ErrorIs(t, stripewebhook.ValidatePayload(sp.Payload, sp.Header, "whsec_old"), stripewebhook.ErrNoValidSignature)
	})
}

// TestStripeToleranceAgreesWithStripeGo checks that Verify and stripe-go
// draw the tolerance boundary in the same place for past timestamps: an
// event exactly Tolerance old is accepted, one a second older is refused.
func TestStripeToleranceAgreesWithStripeGo(t *testing.T) {
	t.Parallel()
	for _, tol := range []time.Duration{0, time.Minute, 10 * time.Minute} {
		t.Run("tolerance="+tol.String(), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				body := stripeEventBody(t)
				src := webhook.Source{Name: "stripe", Kind: webhook.KindStripe, Secrets: []string{"whsec_a"}, Tolerance: tol}
				effective := tol
				if effective == 0 {
					effective = webhook.DefaultTolerance
					require.Equal(t, stripewebhook.DefaultTolerance, webhook.DefaultTolerance)
				}
				sp := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: body, Secret: "whsec_a", Timestamp: time.Now()})
				ours := stripeSigHeader("whsec_a", time.Now().Unix(), body)
				require.Equal(t, sp.Header, ours, "stripe-go and the documented algorithm disagree")

				time.Sleep(effective)
				_, err := webhook.Verify(src, stripeRequest(sp.Header), body, time.Now())
				require.NoError(t, err)
				require.NoError(t, stripewebhook.ValidatePayloadWithTolerance(body, sp.Header, "whsec_a", effective))

				time.Sleep(time.Second)
				_, err = webhook.Verify(src, stripeRequest(sp.Header), body, time.Now())
				require.ErrorIs(t, err, webhook.ErrBadSignature)
				require.ErrorContains(t, err, "outside tolerance")
				require.ErrorIs(t, stripewebhook.ValidatePayloadWithTolerance(body, sp.Header, "whsec_a", effective), stripewebhook.ErrTooOld)
				if tol == 0 {
					_, err = stripewebhook.ConstructEvent(body, sp.Header, "whsec_a")
					require.ErrorIs(t, err, stripewebhook.ErrTooOld)
				}
			})
		})
	}
}

// TestStripeDocumentedSignatureAcceptedByStripeGo signs by the documented
// algorithm and has stripe-go and Verify both accept, over bodies of every
// shape.
func TestStripeDocumentedSignatureAcceptedByStripeGo(t *testing.T) {
	t.Parallel()
	for name, body := range sampleBodies(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				src := webhook.Source{Name: "stripe", Kind: webhook.KindStripe, Secrets: []string{"whsec_1", "whsec_2"}}
				now := time.Now()
				for _, secret := range src.Secrets {
					header := stripeSigHeader(secret, now.Unix(), body)
					require.Equal(t, hex.EncodeToString(stripewebhook.ComputeSignature(now, body, secret)), header[strings.Index(header, "v1=")+3:])
					require.NoError(t, stripewebhook.ValidatePayloadWithTolerance(body, header, secret, webhook.DefaultTolerance))
					_, err := webhook.Verify(src, stripeRequest(header), body, now)
					require.NoError(t, err)
				}
			})
		})
	}
}

// TestStripeTamperingRefusedByBoth: whatever is changed after signing,
// neither implementation accepts it.
func TestStripeTamperingRefusedByBoth(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const secret = "whsec_live"
		body := stripeEventBody(t)
		now := time.Now()
		ts := strconv.FormatInt(now.Unix(), 10)
		sig := stripeV1(secret, ts, body)
		sigBytes, err := hex.DecodeString(sig)
		require.NoError(t, err)
		src := webhook.Source{Name: "stripe", Kind: webhook.KindStripe, Secrets: []string{secret}}

		tests := []struct {
			name     string
			header   string
			body     []byte
			secret   string // the secret Verify and stripe-go are given
			wantOurs string
			wantThey error
		}{
			{name: "first body byte changed", header: "t=" + ts + ",v1=" + sig, body: flipped(body, 0),
				wantOurs: "no secret matched", wantThey: stripewebhook.ErrNoValidSignature},
			{name: "last body byte changed", header: "t=" + ts + ",v1=" + sig, body: flipped(body, len(body)-1),
				wantOurs: "no secret matched", wantThey: stripewebhook.ErrNoValidSignature},
			{name: "body truncated", header: "t=" + ts + ",v1=" + sig, body: body[:len(body)-1],
				wantOurs: "no secret matched", wantThey: stripewebhook.ErrNoValidSignature},
			{name: "body extended", header: "t=" + ts + ",v1=" + sig, body: append(bytes.Clone(body), ' '),
				wantOurs: "no secret matched", wantThey: stripewebhook.ErrNoValidSignature},
			{name: "wrong secret", header: "t=" + ts + ",v1=" + sig, secret: "whsec_other",
				wantOurs: "no secret matched", wantThey: stripewebhook.ErrNoValidSignature},
			{name: "signature bit flipped", header: "t=" + ts + ",v1=" + hex.EncodeToString(flipped(sigBytes, 31)),
				wantOurs: "no secret matched", wantThey: stripewebhook.ErrNoValidSignature},
			{name: "timestamp moved, signature kept", header: "t=" + strconv.FormatInt(now.Unix()-1, 10) + ",v1=" + sig,
				wantOurs: "no secret matched", wantThey: stripewebhook.ErrNoValidSignature},
			{name: "signature only under v0", header: "t=" + ts + ",v0=" + sig,
				wantOurs: "no v1", wantThey: stripewebhook.ErrNoValidSignature},
			{name: "stale but correctly signed", header: stripeSigHeader(secret, now.Unix()-int64(webhook.DefaultTolerance/time.Second)-1, body),
				wantOurs: "outside tolerance", wantThey: stripewebhook.ErrTooOld},
			{name: "no timestamp", header: "v1=" + sig,
				wantOurs: "missing t", wantThey: stripewebhook.ErrTooOld},
		}
		for _, tc := range tests {
			b := body
			if tc.body != nil {
				b = tc.body
			}
			s := src
			theirSecret := secret
			if tc.secret != "" {
				s.Secrets = []string{tc.secret}
				theirSecret = tc.secret
			}
			_, err := webhook.Verify(s, stripeRequest(tc.header), b, now)
			require.ErrorIs(t, err, webhook.ErrBadSignature, tc.name)
			require.ErrorContains(t, err, tc.wantOurs, tc.name)
			require.ErrorIs(t, stripewebhook.ValidatePayload(b, tc.header, theirSecret), tc.wantThey, tc.name)
		}
	})
}

// TestStripeStricterThanStripeGo pins the headers Verify refuses on purpose
// although stripe-go (v85) accepts them. Real Stripe deliveries never look
// like this; refusing them removes any doubt about what was verified.
func TestStripeStricterThanStripeGo(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const secret = "whsec_live"
		body := stripeEventBody(t)
		now := time.Now()
		ts := strconv.FormatInt(now.Unix(), 10)
		sig := stripeV1(secret, ts, body)
		future := now.Unix() + int64(webhook.DefaultTolerance/time.Second) + 1
		src := webhook.Source{Name: "stripe", Kind: webhook.KindStripe, Secrets: []string{secret}}

		tests := []struct {
			name, header, wantOurs string
		}{
			// stripe-go only bounds the age of an event; Verify bounds skew
			// both ways.
			{name: "timestamp beyond tolerance in the future", header: stripeSigHeader(secret, future, body), wantOurs: "outside tolerance"},
			// stripe-go keeps the last t.
			{name: "repeated t", header: "t=1,t=" + ts + ",v1=" + sig, wantOurs: "repeated t"},
			// stripe-go skips v1 values that are not hex.
			{name: "malformed v1 beside a valid one", header: "t=" + ts + ",v1=zz,v1=" + sig, wantOurs: "not a hex"},
			// stripe-go signs over the timestamp it parsed, reformatted.
			{name: "t with a plus sign", header: "t=+" + ts + ",v1=" + sig, wantOurs: "not unix seconds"},
			{name: "t with a leading zero", header: "t=0" + ts + ",v1=" + sig, wantOurs: "not unix seconds"},
			// stripe-go ignores items with an empty key.
			{name: "empty key", header: "t=" + ts + ",=x,v1=" + sig, wantOurs: "not key=value"},
		}
		for _, tc := range tests {
			require.NoError(t, stripewebhook.ValidatePayload(body, tc.header, secret), tc.name)
			_, err := webhook.Verify(src, stripeRequest(tc.header), body, now)
			require.ErrorIs(t, err, webhook.ErrBadSignature, tc.name)
			require.ErrorContains(t, err, tc.wantOurs, tc.name)
		}
	})
}

// TestGitHubSignatureCrossCheck checks X-Hub-Signature-256 against GitHub's
// published test vector and against go-github's ValidateSignature.
func TestGitHubSignatureCrossCheck(t *testing.T) {
	t.Parallel()

	// From GitHub's "Validating webhook deliveries" documentation.
	const (
		docSecret    = "It's a Secret to Everybody"
		docPayload   = "Hello, World!"
		docSignature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	)
	require.Equal(t, docSignature, gitHubSigHeader(docSecret, []byte(docPayload)))
	require.NoError(t, github.ValidateSignature(docSignature, []byte(docPayload), []byte(docSecret)))
	d, err := webhook.Verify(webhook.Source{Name: "gh", Kind: webhook.KindGitHub, Secrets: []string{docSecret}},
		gitHubRequest(docSignature), []byte(docPayload), time.Time{})
	require.NoError(t, err)
	require.Equal(t, webhook.Delivery{ID: "72d3162e-cc78-11e3-81ab-4c9367dc0958", EventType: "push"}, d)

	src := webhook.Source{Name: "gh", Kind: webhook.KindGitHub, Secrets: []string{"gh_old", "gh_new"}}
	for name, body := range sampleBodies(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, secret := range src.Secrets {
				sig := gitHubSigHeader(secret, body)
				require.NoError(t, github.ValidateSignature(sig, body, []byte(secret)))
				_, err := webhook.Verify(src, gitHubRequest(sig), body, time.Time{})
				require.NoError(t, err)
			}

			// Each is checked against the secret gh_new alone.
			sig := gitHubSigHeader("gh_new", body)
			type delivery struct {
				sig  string
				body []byte
			}
			refused := map[string]delivery{
				"wrong secret":    {sig: gitHubSigHeader("gh_other", body), body: body},
				"body extended":   {sig: sig, body: append(bytes.Clone(body), '\n')},
				"sha1 scheme":     {sig: "sha1=" + sig[len("sha256="):], body: body},
				"truncated":       {sig: sig[:len(sig)-2], body: body},
				"signature empty": {sig: "sha256=", body: body},
			}
			if len(body) > 0 {
				refused["first byte changed"] = delivery{sig: sig, body: flipped(body, 0)}
				refused["last byte changed"] = delivery{sig: sig, body: flipped(body, len(body)-1)}
			}
			one := webhook.Source{Name: "gh", Kind: webhook.KindGitHub, Secrets: []string{"gh_new"}}
			for what, r := range refused {
				require.Error(t, github.ValidateSignature(r.sig, r.body, []byte("gh_new")), what)
				_, err := webhook.Verify(one, gitHubRequest(r.sig), r.body, time.Time{})
				require.ErrorIs(t, err, webhook.ErrBadSignature, what)
			}
		})
	}
}
