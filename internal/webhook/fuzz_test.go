package webhook_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
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

var fuzzNow = time.Unix(1_700_000_000, 0)

const fuzzTolerance = int64(webhook.DefaultTolerance / time.Second)

// lenientStripeItems reports whether a Stripe-Signature header uses one of
// the forms Verify tolerates and stripe-go refuses: blanks around an item,
// or an item holding more than one "=" (stripe-go refuses the whole header,
// Verify ignores the item when its scheme is not t or v1).
func lenientStripeItems(header string) bool {
	for _, item := range strings.Split(header, ",") {
		if strings.TrimSpace(item) != item || strings.Count(item, "=") > 1 {
			return true
		}
	}
	return false
}

// FuzzStripeSignatureHeader wraps a correctly signed Stripe-Signature item
// in fuzzed text and compares Verify's verdict with stripe-go's:
//   - a header signed by the documented algorithm, with nothing around it,
//     verifies exactly when its timestamp is within tolerance;
//   - whatever Verify accepts, stripe-go accepts too, except for the
//     lenient forms lenientStripeItems names;
//   - whatever Verify refuses and stripe-go accepts is refused for its
//     shape or its age, never because Verify computed a different MAC;
//   - once accepted, a one-byte change to the body or one flipped bit of
//     the signature is refused by both.
func FuzzStripeSignatureHeader(f *testing.F) {
	f.Add([]byte(`{"id":"evt_1","type":"charge.succeeded"}`), int32(0), "", "", "", false, uint(0))
	f.Add([]byte{}, int32(300), "", "", "", false, uint(0))
	f.Add([]byte("x"), int32(-301), "", "", "", false, uint(0))
	f.Add([]byte("x"), int32(0), "0", "", "", true, uint(0))
	f.Add([]byte("x"), int32(0), "+", "", "", true, uint(0))
	f.Add([]byte("body"), int32(12), "", "v0=abc, ", ", v1=zz", false, uint(3))
	f.Add([]byte("body"), int32(-12), "", "t=1,", ",x=a=b", false, uint(1))
	f.Add([]byte("body"), int32(0), "", " ", ",=", false, uint(1))
	f.Add([]byte("a,b=c"), int32(-1_700_000_001), "", "", "", false, uint(9))

	const secret = "whsec_fuzz"
	src := webhook.Source{Name: "stripe", Kind: webhook.KindStripe, Secrets: []string{"whsec_other", secret}}
	f.Fuzz(func(t *testing.T, body []byte, offset int32, pad, before, after string, canonicalMAC bool, at uint) {
		ts := fuzzNow.Unix() + int64(offset)
		tText := pad + strconv.FormatInt(ts, 10)
		signedT := tText
		if canonicalMAC {
			signedT = strconv.FormatInt(ts, 10)
		}
		sig := stripeV1(secret, signedT, body)
		header := before + "t=" + tText + ",v1=" + sig + after

		d, err := webhook.Verify(src, stripeRequest(header), body, fuzzNow)
		require.Equal(t, webhook.Delivery{}, d)
		if err != nil {
			require.ErrorIs(t, err, webhook.ErrBadSignature)
		}
		theirs := stripewebhook.ValidatePayloadIgnoringTolerance(body, header, secret)

		if pad == "" && before == "" && after == "" {
			require.NoError(t, theirs, "stripe-go refuses a documented header %q", header)
			within := offset >= -int32(fuzzTolerance) && offset <= int32(fuzzTolerance)
			require.Equal(t, within, err == nil, "header %q, skew %ds: %v", header, offset, err)
		}
		switch {
		case err == nil && theirs != nil:
			require.True(t, lenientStripeItems(header), "Verify accepts %q, stripe-go refuses it: %v", header, theirs)
		case err != nil && theirs == nil:
			require.NotContains(t, err.Error(), "no secret matched",
				"stripe-go accepts %q, Verify computes another MAC", header)
		}
		if err != nil {
			return
		}

		if len(body) > 0 {
			changed := flipped(body, int(at%uint(len(body))))
			_, err := webhook.Verify(src, stripeRequest(header), changed, fuzzNow)
			require.ErrorIs(t, err, webhook.ErrBadSignature, "body byte %d changed", at%uint(len(body)))
			require.Error(t, stripewebhook.ValidatePayloadIgnoringTolerance(changed, header, secret))
		}
		for _, changed := range [][]byte{append(bytes.Clone(body), '}'), body[:max(len(body)-1, 0)]} {
			if bytes.Equal(changed, body) {
				continue
			}
			_, err := webhook.Verify(src, stripeRequest(header), changed, fuzzNow)
			require.ErrorIs(t, err, webhook.ErrBadSignature)
		}
		raw, _ := hex.DecodeString(sig)
		raw[at%uint(len(raw))] ^= 1 << (at % 8)
		badHeader := strings.Replace(header, sig, hex.EncodeToString(raw), 1)
		_, err = webhook.Verify(src, stripeRequest(badHeader), body, fuzzNow)
		require.ErrorIs(t, err, webhook.ErrBadSignature, "signature bit flipped: %q", badHeader)
		require.Error(t, stripewebhook.ValidatePayloadIgnoringTolerance(body, badHeader, secret))
	})
}

// FuzzStripeHeaderParser feeds arbitrary Stripe-Signature headers. Nothing
// forged verifies; whatever is refused is refused as a bad signature; and
// Verify never accepts what stripe-go refuses, lenient forms aside.
func FuzzStripeHeaderParser(f *testing.F) {
	ts := strconv.FormatInt(fuzzNow.Unix(), 10)
	f.Add("t=" + ts + ",v1=" + strings.Repeat("ab", 32))
	f.Add("t=" + ts + ",v1=" + strings.Repeat("AB", 32) + ",v0=")
	f.Add("t=,v1=")
	f.Add(",,,")
	f.Add("t=" + ts + "," + ts + "=t")
	f.Add("t=99999999999999999999,v1=00")
	f.Add("t=-1,v1=" + strings.Repeat("0", 64))
	f.Add(" t = " + ts + " ,\tv1=" + strings.Repeat("0", 64))
	src := webhook.Source{Name: "stripe", Kind: webhook.KindStripe, Secrets: []string{"whsec_fuzz"}, Tolerance: time.Duration(1<<63 - 1)}
	body := []byte(`{"id":"evt_1"}`)
	f.Fuzz(func(t *testing.T, header string) {
		d, err := webhook.Verify(src, stripeRequest(header), body, fuzzNow)
		require.Equal(t, webhook.Delivery{}, d)
		require.ErrorIs(t, err, webhook.ErrBadSignature, "forged header %q verified", header)
		require.Error(t, stripewebhook.ValidatePayloadIgnoringTolerance(body, header, "whsec_fuzz"))
	})
}

// FuzzHMACSignature signs fuzzed bodies for a generic HMAC source with a
// fuzzed prefix, either encoding, with and without a timestamp header. A
// correct signature verifies exactly when the timestamp (if any) is within
// tolerance; after that, a changed body, a flipped signature bit, another
// secret, the other encoding, a missing prefix or another timestamp are all
// refused.
func FuzzHMACSignature(f *testing.F) {
	f.Add([]byte(`{"type":"order.paid"}`), "sha256=", false, false, int32(0), uint(0))
	f.Add([]byte(`{"type":"order.paid"}`), "", true, true, int32(300), uint(7))
	f.Add([]byte{}, "v1,", true, false, int32(0), uint(0))
	f.Add([]byte{0}, "x", false, true, int32(-301), uint(1))
	f.Add([]byte("payload"), "a", false, true, int32(-300), uint(63))
	f.Add([]byte("payload"), "QUFB", true, false, int32(0), uint(2))

	secrets := []string{"k_old", "k_new"}
	f.Fuzz(func(t *testing.T, body []byte, prefix string, useBase64, useTimestamp bool, offset int32, at uint) {
		src := webhook.Source{Name: "hmac", Kind: webhook.KindHMAC, Secrets: secrets, Header: "X-Signature", Prefix: prefix}
		encode, other := hex.EncodeToString, base64.StdEncoding.EncodeToString
		if useBase64 {
			src.Encoding = webhook.EncodingBase64
			encode, other = other, encode
		}
		ts := strconv.FormatInt(fuzzNow.Unix()+int64(offset), 10)
		if useTimestamp {
			src.TimestampHeader = "X-Timestamp"
		}
		signed := func(secret string, body []byte) []byte {
			if useTimestamp {
				return hmacSHA256(secret, []byte(ts), []byte("."), body)
			}
			return hmacSHA256(secret, body)
		}
		request := func(sig, ts string) http.Header {
			h := http.Header{}
			h.Set("X-Signature", sig)
			if useTimestamp {
				h.Set("X-Timestamp", ts)
			}
			return h
		}
		refused := func(what string, h http.Header, body []byte) {
			t.Helper()
			d, err := webhook.Verify(src, h, body, fuzzNow)
			require.ErrorIs(t, err, webhook.ErrBadSignature, "%s: %v", what, h)
			require.Equal(t, webhook.Delivery{}, d)
		}

		secret := secrets[at%uint(len(secrets))]
		mac := signed(secret, body)
		good := request(prefix+encode(mac), ts)
		_, err := webhook.Verify(src, good, body, fuzzNow)
		within := !useTimestamp || (int64(offset) >= -fuzzTolerance && int64(offset) <= fuzzTolerance)
		if !within {
			require.ErrorIs(t, err, webhook.ErrBadSignature)
			require.ErrorContains(t, err, "outside tolerance")
			return
		}
		require.NoError(t, err, "header %v", good)

		if len(body) > 0 {
			refused("body byte changed", good, flipped(body, int(at%uint(len(body)))))
		}
		refused("body extended", good, append(bytes.Clone(body), 0))
		bad := bytes.Clone(mac)
		bad[at%uint(len(bad))] ^= 1 << (at % 8)
		refused("signature bit flipped", request(prefix+encode(bad), ts), body)
		refused("unknown secret", request(prefix+encode(signed("k_unknown", body)), ts), body)
		refused("other encoding", request(prefix+other(mac), ts), body)
		if prefix != "" {
			refused("prefix missing", request(encode(mac), ts), body)
		}
		if useTimestamp {
			refused("timestamp changed", request(prefix+encode(mac), strconv.FormatInt(fuzzNow.Unix()+int64(offset)+1, 10)), body)
			refused("timestamp missing", request(prefix+encode(mac), ""), body)
			refused("body-only signature", request(prefix+encode(hmacSHA256(secret, body)), ts), body)
		}
	})
}

// FuzzGitHubSignature wraps a correctly signed X-Hub-Signature-256 value in
// fuzzed text: Verify and go-github's ValidateSignature must agree on every
// value, and a documented signature with nothing around it always verifies.
func FuzzGitHubSignature(f *testing.F) {
	f.Add([]byte(`{"zen":"Keep it logically awesome."}`), "", "", uint(0))
	f.Add([]byte{}, "sha1=", "", uint(1))
	f.Add([]byte("x"), "", "00", uint(2))
	f.Add([]byte("x"), "sha256=", "=", uint(3))
	const secret = "gh_fuzz"
	src := webhook.Source{Name: "gh", Kind: webhook.KindGitHub, Secrets: []string{"gh_other", secret}}
	f.Fuzz(func(t *testing.T, body []byte, before, after string, at uint) {
		sig := gitHubSigHeader(secret, body)
		header := before + sig + after
		d, err := webhook.Verify(src, gitHubRequest(header), body, time.Time{})
		theirs := github.ValidateSignature(header, body, []byte(secret))
		require.Equal(t, theirs == nil, err == nil, "header %q: Verify %v, go-github %v", header, err, theirs)
		if err != nil {
			require.ErrorIs(t, err, webhook.ErrBadSignature)
			require.Equal(t, webhook.Delivery{}, d)
		}
		if before == "" && after == "" {
			require.NoError(t, err)
		}
		if err != nil || len(body) == 0 {
			return
		}
		changed := flipped(body, int(at%uint(len(body))))
		_, err = webhook.Verify(src, gitHubRequest(header), changed, time.Time{})
		require.ErrorIs(t, err, webhook.ErrBadSignature)
		require.Error(t, github.ValidateSignature(header, changed, []byte(secret)))
	})
}

// escapeToken is RFC 6901's encoding of one reference token.
func escapeToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// badEscape reports whether a pointer token holds a "~" that is not "~0"
// or "~1".
func badEscape(tok string) bool {
	for i := 0; i < len(tok); i++ {
		if tok[i] == '~' && (i+1 == len(tok) || (tok[i+1] != '0' && tok[i+1] != '1')) {
			return true
		}
	}
	return false
}

// FuzzPointer checks Pointer against the document it reads:
//   - every value in a document is selected by the pointer built from its
//     path, keys escaped as RFC 6901 says;
//   - whatever a pointer selects, its parent pointer selects the container
//     holding it under the last token;
//   - a "~" not followed by 0 or 1 is refused;
//   - re-escaping the decoded tokens selects the same thing;
//   - failures wrap ErrPointer.
func FuzzPointer(f *testing.F) {
	rfc := `{"foo": ["bar", "baz"], "": 0, "a/b": 1, "c%d": 2, "e^f": 3, "g|h": 4, "i\\j": 5, "k\"l": 6, " ": 7, "m~n": 8}`
	f.Add(rfc, "/foo/0", []byte{0, 1})
	f.Add(rfc, "/a~1b", []byte{3})
	f.Add(rfc, "/m~0n", []byte{9, 9, 9})
	f.Add(rfc, "/", []byte{})
	f.Add(`{"a":{"~1":{"/":[1,[2,{"x~":3}]]}}}`, "/a/~01/~1/1/1/x~0", []byte{0, 0, 0, 1, 1, 0})
	f.Add(`[[],[[]],{}]`, "/1/0/", []byte{1, 0})
	f.Add(`{"a":[1]}`, "a", []byte{})
	f.Add(`"scalar"`, "", []byte{})
	f.Fuzz(func(t *testing.T, raw, ptr string, path []byte) {
		var doc any
		if json.Unmarshal([]byte(raw), &doc) != nil {
			return
		}

		// Walk the document along path, building the pointer to the node.
		node, built := pathTo(doc, path)
		got, err := webhook.Pointer(doc, built)
		require.NoError(t, err, "pointer %q built from the document", built)
		require.True(t, reflect.DeepEqual(node, got), "pointer %q: got %#v, want %#v", built, got, node)

		// The fuzzed pointer.
		got, err = webhook.Pointer(doc, ptr)
		if ptr == "" {
			require.NoError(t, err)
			require.True(t, reflect.DeepEqual(doc, got))
			return
		}
		if !strings.HasPrefix(ptr, "/") {
			require.ErrorIs(t, err, webhook.ErrPointer)
			return
		}
		tokens := strings.Split(ptr[1:], "/")
		if slices.ContainsFunc(tokens, badEscape) {
			// RFC 6901: "~" is followed by 0 or 1, or the pointer is not one.
			require.ErrorIs(t, err, webhook.ErrPointer, "%q has a bad escape", ptr)
			return
		}
		for i, tok := range tokens {
			tokens[i] = escapeToken(strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~"))
		}
		again, err2 := webhook.Pointer(doc, "/"+strings.Join(tokens, "/"))
		require.Equal(t, err == nil, err2 == nil, "%q and its re-escaped form disagree", ptr)
		if err != nil {
			require.ErrorIs(t, err, webhook.ErrPointer)
			require.True(t, errors.Is(err2, webhook.ErrPointer))
			return
		}
		require.True(t, reflect.DeepEqual(got, again))

		cut := strings.LastIndexByte(ptr, '/')
		parent, err := webhook.Pointer(doc, ptr[:cut])
		require.NoError(t, err, "%q selects something but its parent %q does not", ptr, ptr[:cut])
		last := strings.ReplaceAll(strings.ReplaceAll(ptr[cut+1:], "~1", "/"), "~0", "~")
		switch p := parent.(type) {
		case map[string]any:
			require.True(t, reflect.DeepEqual(p[last], got))
		case []any:
			i, err := strconv.Atoi(last)
			require.NoError(t, err)
			require.True(t, reflect.DeepEqual(p[i], got))
		default:
			t.Fatalf("%q selects inside a %T", ptr, parent)
		}
	})
}
