package webhook_test

import (
	"crypto/hmac"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"
	"github.com/stretchr/testify/require"
	stripewebhook "github.com/stripe/stripe-go/v85/webhook"

	"github.com/harvest-engine/harvest/internal/webhook"
)

// gitHubHeaders is a GitHub delivery's headers: the signature, the
// delivery id and the event type, each set only when not empty.
func gitHubHeaders(sig, delivery, event string) http.Header {
	h := http.Header{}
	for name, v := range map[string]string{webhook.HeaderGitHubSignature: sig, webhook.HeaderGitHubDelivery: delivery, webhook.HeaderGitHubEvent: event} {
		if v != "" {
			h.Set(name, v)
		}
	}
	return h
}

// FuzzGitHubHeaderParser feeds any X-Hub-Signature-256 value and any
// delivery and event headers:
//   - a value Verify accepts is one go-github also accepts for one of the
//     secrets, under the sha256= scheme, and the Delivery returned is the
//     delivery and event headers as sent;
//   - ErrMissingHeader is only ever reported for a correctly signed
//     request, and only when the delivery or event header is missing;
//   - every other refusal wraps ErrBadSignature;
//   - the documented signature of the body verifies, in lower or upper
//     case hex, exactly when both headers are present; sent twice, or
//     with one bit flipped, it is refused.
func FuzzGitHubHeaderParser(f *testing.F) {
	body := []byte(`{"zen":"Design for failure."}`)
	f.Add(gitHubSigHeader("gh_fuzz", body), "72d3162e-cc78-11e3-81ab-4c9367dc0958", "push", body, uint(0))
	f.Add(gitHubSigHeader("gh_fuzz", body), "", "push", body, uint(1))
	f.Add(gitHubSigHeader("gh_fuzz", body), "d", "", body, uint(2))
	f.Add("sha256="+strings.Repeat("0", 64), "d", "e", []byte{}, uint(3))
	f.Add("sha1=0123456789abcdef0123456789abcdef01234567", "d", "e", []byte("x"), uint(4))
	f.Add("sha256=", "d", "e", []byte("\x00"), uint(5))
	f.Add("SHA256="+strings.Repeat("ab", 32), "d\x00", "e\xff", []byte("\xff\xfe"), uint(6))
	f.Add(" sha256="+strings.Repeat("ab", 32)+" ", "d", "e", []byte("{}"), uint(7))
	f.Add("sha256="+strings.Repeat("ab", 33), "d", "e", []byte(strings.Repeat("[", 300)), uint(8))

	secrets := []string{"gh_other", "gh_fuzz"}
	src := webhook.Source{Name: "gh", Kind: webhook.KindGitHub, Secrets: secrets}
	f.Fuzz(func(t *testing.T, sig, delivery, event string, body []byte, at uint) {
		d, err := webhook.Verify(src, gitHubHeaders(sig, delivery, event), body, time.Time{})
		goGitHub := slices.ContainsFunc(secrets, func(s string) bool { return github.ValidateSignature(sig, body, []byte(s)) == nil })
		signed := goGitHub && strings.HasPrefix(sig, "sha256=")
		switch {
		case err == nil:
			require.True(t, signed, "Verify accepts %q, go-github refuses it", sig)
			require.Equal(t, webhook.Delivery{ID: delivery, EventType: event}, d)
		case errors.Is(err, webhook.ErrMissingHeader):
			require.True(t, signed, "%q: a missing header is reported for a request that is not signed", sig)
			require.True(t, delivery == "" || event == "", "both headers are there: %v", err)
			require.NotErrorIs(t, err, webhook.ErrBadSignature)
			require.Equal(t, webhook.Delivery{}, d)
		default:
			require.ErrorIs(t, err, webhook.ErrBadSignature)
			require.False(t, signed, "go-github accepts %q, Verify refuses it: %v", sig, err)
			require.Equal(t, webhook.Delivery{}, d)
		}

		// The documented signature, computed here with the secret.
		mac := hmacSHA256("gh_fuzz", body)
		good := "sha256=" + hex.EncodeToString(mac)
		for _, v := range []string{good, "sha256=" + strings.ToUpper(hex.EncodeToString(mac))} {
			d, err := webhook.Verify(src, gitHubHeaders(v, delivery, event), body, time.Time{})
			if delivery != "" && event != "" {
				require.NoError(t, err, "%q", v)
				require.Equal(t, webhook.Delivery{ID: delivery, EventType: event}, d)
			} else {
				require.ErrorIs(t, err, webhook.ErrMissingHeader)
				require.NotErrorIs(t, err, webhook.ErrBadSignature)
			}
		}
		twice := gitHubHeaders(good, delivery, event)
		twice.Add(webhook.HeaderGitHubSignature, good)
		_, err = webhook.Verify(src, twice, body, time.Time{})
		require.ErrorIs(t, err, webhook.ErrBadSignature, "a repeated signature header")
		bad := slices.Clone(mac)
		bad[at%uint(len(bad))] ^= 1 << (at % 8)
		_, err = webhook.Verify(src, gitHubHeaders("sha256="+hex.EncodeToString(bad), delivery, event), body, time.Time{})
		require.ErrorIs(t, err, webhook.ErrBadSignature, "a flipped signature bit")
	})
}

// timestampWithin is the rule for a generic HMAC source's timestamp
// header, written out independently of Verify: 1 to 19 ASCII digits (no
// sign, no blanks) whose value is within fuzzTolerance seconds of fuzzNow.
func timestampWithin(ts string) bool {
	if ts == "" || len(ts) > 19 || strings.ContainsFunc(ts, func(r rune) bool { return r < '0' || r > '9' }) {
		return false
	}
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	d := n - fuzzNow.Unix()
	return d >= -fuzzTolerance && d <= fuzzTolerance
}

// FuzzHMACHeaderParser feeds any signature header and any timestamp header
// to a generic HMAC source (prefix "sha256=", hex or base64, with or
// without a timestamp header):
//   - whatever Verify accepts decodes, after the prefix, to the HMAC of
//     the signed payload under one of the secrets, and its timestamp (if
//     the source uses one) follows timestampWithin; anything else is
//     refused, wrapping ErrBadSignature;
//   - a signature computed here over the fuzzed timestamp text verifies
//     exactly when the timestamp follows timestampWithin, and with a
//     body byte changed it is refused.
func FuzzHMACHeaderParser(f *testing.F) {
	ts := strconv.FormatInt(fuzzNow.Unix(), 10)
	body := []byte(`{"type":"order.paid"}`)
	f.Add("sha256="+hex.EncodeToString(hmacSHA256("k_new", body)), ts, body, false, false, uint(0))
	f.Add("sha256="+base64.StdEncoding.EncodeToString(hmacSHA256("k_old", []byte(ts), []byte("."), body)), ts, body, true, true, uint(1))
	f.Add("sha256=", "", []byte{}, false, true, uint(2))
	f.Add("sha256="+strings.Repeat("A", 43)+"=", "0"+ts, []byte("\x00"), true, true, uint(3))
	f.Add("sha256="+strings.Repeat("A", 44), "+"+ts, []byte("x"), true, true, uint(4))
	f.Add(strings.Repeat("0", 64), " "+ts, []byte("x"), false, true, uint(5))
	f.Add("sha256="+strings.Repeat("0", 64), "99999999999999999999", []byte("x"), false, true, uint(6))
	f.Add("sha256="+strings.Repeat("0", 64), "9223372036854775807", []byte("x"), false, true, uint(7))
	f.Add("sha256="+strings.Repeat("0", 64), "-1", []byte("x"), false, true, uint(8))
	f.Add("sha256="+strings.Repeat("0", 64), "00000000000000000001", []byte("x"), false, true, uint(9))
	f.Add("sha256="+strings.Repeat("0", 64), strconv.FormatInt(fuzzNow.Unix()+fuzzTolerance+1, 10), body, false, true, uint(10))
	f.Add("sha256="+strings.Repeat("0", 64), "1e9", body, false, true, uint(11))

	secrets := []string{"k_old", "k_new"}
	f.Fuzz(func(t *testing.T, sig, ts string, body []byte, useBase64, useTimestamp bool, at uint) {
		src := webhook.Source{Name: "hmac", Kind: webhook.KindHMAC, Secrets: secrets, Header: "X-Signature", Prefix: "sha256="}
		encode, decode := hex.EncodeToString, hex.DecodeString
		if useBase64 {
			src.Encoding = webhook.EncodingBase64
			encode, decode = base64.StdEncoding.EncodeToString, base64.StdEncoding.Strict().DecodeString
		}
		payload := [][]byte{body}
		if useTimestamp {
			src.TimestampHeader = "X-Timestamp"
			payload = [][]byte{[]byte(ts), []byte("."), body}
		}
		request := func(sig string) http.Header {
			h := http.Header{}
			h.Set("X-Signature", sig)
			h.Set("X-Timestamp", ts)
			return h
		}

		d, err := webhook.Verify(src, request(sig), body, fuzzNow)
		require.Equal(t, webhook.Delivery{}, d)
		if err != nil {
			require.ErrorIs(t, err, webhook.ErrBadSignature)
		} else {
			enc, ok := strings.CutPrefix(sig, src.Prefix)
			require.True(t, ok, "%q accepted without its prefix", sig)
			got, derr := decode(enc)
			require.NoError(t, derr, "%q accepted, but it does not decode", sig)
			require.True(t, slices.ContainsFunc(secrets, func(s string) bool { return hmac.Equal(got, hmacSHA256(s, payload...)) }),
				"%q accepted, but it is no secret's signature", sig)
			if useTimestamp {
				require.True(t, timestampWithin(ts), "timestamp %q accepted", ts)
			}
		}

		// Signed here, over the timestamp text as it is sent.
		secret := secrets[at%uint(len(secrets))]
		good := src.Prefix + encode(hmacSHA256(secret, payload...))
		_, err = webhook.Verify(src, request(good), body, fuzzNow)
		if useTimestamp && !timestampWithin(ts) {
			require.ErrorIs(t, err, webhook.ErrBadSignature, "timestamp %q accepted", ts)
			return
		}
		require.NoError(t, err, "a correct signature, timestamp %q", ts)
		if len(body) > 0 {
			_, err = webhook.Verify(src, request(good), flipped(body, int(at%uint(len(body)))), fuzzNow)
			require.ErrorIs(t, err, webhook.ErrBadSignature, "a changed body")
		}
	})
}

// FuzzStripeHeaderItems builds Stripe-Signature headers from their items
// (the timestamp, the right v1 signature, a v1 under an unknown secret, a
// v0 scheme with fuzzed text) in any order, with or without blanks after
// the commas:
//   - the verdict does not depend on the order of the items or on
//     schemes Stripe may add: the header verifies exactly when the
//     timestamp is within tolerance;
//   - stripe-go agrees whenever the header holds no form lenientStripeItems
//     names;
//   - a second t item, even an equal one, makes the header refused.
func FuzzStripeHeaderItems(f *testing.F) {
	f.Add([]byte(`{"id":"evt_1","type":"charge.succeeded"}`), int32(0), "", uint(0), false)
	f.Add([]byte{}, int32(300), "abc", uint(5), true)
	f.Add([]byte("x"), int32(-301), "==", uint(23), false)
	f.Add([]byte("\x00\xff"), int32(12), " ", uint(7), true)
	f.Add([]byte("x"), int32(0), "t=1", uint(11), false)

	const secret = "whsec_fuzz"
	src := webhook.Source{Name: "stripe", Kind: webhook.KindStripe, Secrets: []string{"whsec_other", secret}}
	f.Fuzz(func(t *testing.T, body []byte, offset int32, extra string, order uint, spaces bool) {
		// A comma would split the v0 item in two, which is another test.
		extra = strings.ReplaceAll(extra, ",", "")
		ts := strconv.FormatInt(fuzzNow.Unix()+int64(offset), 10)
		items := []string{"t=" + ts, "v1=" + stripeV1(secret, ts, body), "v1=" + stripeV1("whsec_unknown", ts, body), "v0=" + extra}
		// Permute the items: order, read digit by digit in bases 4, 3, 2
		// and 1, picks the next item among those left.
		var permuted []string
		for n := order; len(items) > 0; {
			left := uint(len(items))
			i := int(n % left)
			n /= left
			permuted = append(permuted, items[i])
			items = slices.Delete(items, i, i+1)
		}
		sep := ","
		if spaces {
			sep = ", "
		}
		header := strings.Join(permuted, sep)

		_, err := webhook.Verify(src, stripeRequest(header), body, fuzzNow)
		within := int64(offset) >= -fuzzTolerance && int64(offset) <= fuzzTolerance
		if within {
			require.NoError(t, err, "header %q", header)
		} else {
			require.ErrorIs(t, err, webhook.ErrBadSignature)
			require.ErrorContains(t, err, "outside tolerance")
		}
		if !lenientStripeItems(header) {
			require.NoError(t, stripewebhook.ValidatePayloadIgnoringTolerance(body, header, secret), "stripe-go refuses %q", header)
		}
		_, err = webhook.Verify(src, stripeRequest(header+sep+"t="+ts), body, fuzzNow)
		require.ErrorIs(t, err, webhook.ErrBadSignature, "a repeated t item")
	})
}
