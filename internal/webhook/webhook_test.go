package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	testNow  = time.Unix(1_700_000_000, 0)
	testBody = []byte(`{"id":"evt_1","type":"payment_intent.succeeded"}`)
)

func sign(secret string, payload ...[]byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	for _, p := range payload {
		m.Write(p)
	}
	return m.Sum(nil)
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func stripeHeader(secret string, ts int64, body []byte) string {
	t := strconv.FormatInt(ts, 10)
	return "t=" + t + ",v1=" + hex.EncodeToString(sign(secret, []byte(t+"."), body))
}

func TestVerifyStripe(t *testing.T) {
	src := Source{Name: "stripe", Kind: KindStripe, Secrets: []string{"whsec_old", "whsec_new"}}
	now := testNow.Unix()
	tol := int64(DefaultTolerance / time.Second)
	good := stripeHeader("whsec_old", now, testBody)
	goodNew := stripeHeader("whsec_new", now, testBody)
	wrongSig := hex.EncodeToString(sign("whsec_other", []byte(strconv.FormatInt(now, 10)+"."), testBody))

	tests := []struct {
		name    string
		h       http.Header
		body    []byte
		now     time.Time
		src     *Source
		wantErr string // empty: success
	}{
		{name: "valid first secret", h: hdr(HeaderStripeSignature, good)},
		{name: "rotation second secret", h: hdr(HeaderStripeSignature, goodNew)},
		{name: "multiple v1 one matches", h: hdr(HeaderStripeSignature, goodNew+",v1="+wrongSig)},
		{name: "v1 wrong first then right", h: hdr(HeaderStripeSignature, "t="+strconv.FormatInt(now, 10)+",v1="+wrongSig+","+goodNew[len("t=,")+len(strconv.FormatInt(now, 10)):])},
		{name: "v0 and spaces ignored", h: hdr(HeaderStripeSignature, "t="+strconv.FormatInt(now, 10)+", v0=abc, "+goodNew[len("t=,")+len(strconv.FormatInt(now, 10)):])},
		{name: "past at exact boundary", h: hdr(HeaderStripeSignature, stripeHeader("whsec_new", now-tol, testBody))},
		{name: "future at exact boundary", h: hdr(HeaderStripeSignature, stripeHeader("whsec_new", now+tol, testBody))},
		{name: "past just outside", h: hdr(HeaderStripeSignature, stripeHeader("whsec_new", now-tol-1, testBody)), wantErr: "outside tolerance"},
		{name: "future just outside", h: hdr(HeaderStripeSignature, stripeHeader("whsec_new", now+tol+1, testBody)), wantErr: "outside tolerance"},
		{name: "boundary with sub-second now is outside", h: hdr(HeaderStripeSignature, stripeHeader("whsec_new", now-tol, testBody)), now: testNow.Add(time.Millisecond), wantErr: "outside tolerance"},
		{name: "custom tolerance", h: hdr(HeaderStripeSignature, stripeHeader("whsec_new", now-tol-1, testBody)),
			src: &Source{Kind: KindStripe, Secrets: []string{"whsec_new"}, Tolerance: 10 * time.Minute}},
		{name: "custom tolerance exceeded", h: hdr(HeaderStripeSignature, stripeHeader("whsec_new", now-61, testBody)),
			src: &Source{Kind: KindStripe, Secrets: []string{"whsec_new"}, Tolerance: time.Minute}, wantErr: "outside tolerance"},
		{name: "huge timestamp", h: hdr(HeaderStripeSignature, "t=9223372036854775807,v1="+wrongSig), wantErr: "outside tolerance"},
		{name: "body tampered", h: hdr(HeaderStripeSignature, good), body: []byte(`{"id":"evt_2"}`), wantErr: "no secret matched"},
		{name: "unknown secret", h: hdr(HeaderStripeSignature, "t="+strconv.FormatInt(now, 10)+",v1="+wrongSig), wantErr: "no secret matched"},
		{name: "missing header", h: hdr(), wantErr: "missing Stripe-Signature"},
		{name: "empty header", h: hdr(HeaderStripeSignature, ""), wantErr: "missing Stripe-Signature"},
		{name: "repeated header", h: hdr(HeaderStripeSignature, good, HeaderStripeSignature, good), wantErr: "repeated"},
		{name: "no t", h: hdr(HeaderStripeSignature, "v1="+wrongSig), wantErr: "missing t"},
		{name: "repeated t", h: hdr(HeaderStripeSignature, "t=1,"+good), wantErr: "repeated t"},
		{name: "non numeric t", h: hdr(HeaderStripeSignature, "t=abc,v1="+wrongSig), wantErr: "not unix seconds"},
		{name: "signed t", h: hdr(HeaderStripeSignature, "t=+"+strconv.FormatInt(now, 10)+",v1="+wrongSig), wantErr: "not unix seconds"},
		{name: "no v1", h: hdr(HeaderStripeSignature, "t="+strconv.FormatInt(now, 10)+",v0=abc"), wantErr: "no v1"},
		{name: "item without equals", h: hdr(HeaderStripeSignature, good+",garbage"), wantErr: "not key=value"},
		{name: "v1 not hex", h: hdr(HeaderStripeSignature, "t="+strconv.FormatInt(now, 10)+",v1=zz"), wantErr: "not a hex"},
		{name: "v1 wrong length", h: hdr(HeaderStripeSignature, "t="+strconv.FormatInt(now, 10)+",v1=abcd"), wantErr: "not a hex"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := src
			if tc.src != nil {
				s = *tc.src
			}
			body := testBody
			if tc.body != nil {
				body = tc.body
			}
			at := testNow
			if !tc.now.IsZero() {
				at = tc.now
			}
			d, err := Verify(s, tc.h, body, at)
			if tc.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, Delivery{}, d)
				return
			}
			require.ErrorIs(t, err, ErrBadSignature)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestVerifyGitHub(t *testing.T) {
	src := Source{Name: "gh", Kind: KindGitHub, Secrets: []string{"old", "new"}}
	sigOld := "sha256=" + hex.EncodeToString(sign("old", testBody))
	sigNew := "sha256=" + hex.EncodeToString(sign("new", testBody))
	sigOther := "sha256=" + hex.EncodeToString(sign("other", testBody))

	tests := []struct {
		name    string
		h       http.Header
		want    Delivery
		wantIs  error
		wantErr string
	}{
		{name: "valid", h: hdr(HeaderGitHubSignature, sigOld, HeaderGitHubDelivery, "d-1", HeaderGitHubEvent, "push"),
			want: Delivery{ID: "d-1", EventType: "push"}},
		{name: "rotation second secret", h: hdr(HeaderGitHubSignature, sigNew, HeaderGitHubDelivery, "d-2", HeaderGitHubEvent, "ping"),
			want: Delivery{ID: "d-2", EventType: "ping"}},
		{name: "uppercase hex accepted", h: hdr(HeaderGitHubSignature, "sha256="+strings.ToUpper(hex.EncodeToString(sign("new", testBody))), HeaderGitHubDelivery, "d", HeaderGitHubEvent, "e"),
			want: Delivery{ID: "d", EventType: "e"}},
		{name: "wrong secret", h: hdr(HeaderGitHubSignature, sigOther, HeaderGitHubDelivery, "d", HeaderGitHubEvent, "e"),
			wantIs: ErrBadSignature, wantErr: "no secret matched"},
		{name: "missing signature", h: hdr(HeaderGitHubDelivery, "d", HeaderGitHubEvent, "e"),
			wantIs: ErrBadSignature, wantErr: "missing X-Hub-Signature-256"},
		{name: "sha1 prefix", h: hdr(HeaderGitHubSignature, "sha1=abcd", HeaderGitHubDelivery, "d", HeaderGitHubEvent, "e"),
			wantIs: ErrBadSignature, wantErr: "sha256= prefix"},
		{name: "bad hex", h: hdr(HeaderGitHubSignature, "sha256=xyz", HeaderGitHubDelivery, "d", HeaderGitHubEvent, "e"),
			wantIs: ErrBadSignature, wantErr: "not a hex"},
		{name: "missing delivery", h: hdr(HeaderGitHubSignature, sigOld, HeaderGitHubEvent, "push"),
			wantIs: ErrMissingHeader, wantErr: HeaderGitHubDelivery},
		{name: "missing event", h: hdr(HeaderGitHubSignature, sigOld, HeaderGitHubDelivery, "d"),
			wantIs: ErrMissingHeader, wantErr: HeaderGitHubEvent},
		{name: "bad signature checked before delivery", h: hdr(HeaderGitHubSignature, sigOther),
			wantIs: ErrBadSignature, wantErr: "no secret matched"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Verify(src, tc.h, testBody, testNow)
			if tc.wantIs == nil {
				require.NoError(t, err)
				require.Equal(t, tc.want, d)
				return
			}
			require.ErrorIs(t, err, tc.wantIs)
			require.ErrorContains(t, err, tc.wantErr)
			require.Equal(t, Delivery{}, d)
			if errors.Is(tc.wantIs, ErrMissingHeader) {
				require.NotErrorIs(t, err, ErrBadSignature)
			}
		})
	}
}

func TestVerifyHMAC(t *testing.T) {
	now := testNow.Unix()
	ts := strconv.FormatInt(now, 10)
	hexSrc := Source{Name: "h", Kind: KindHMAC, Secrets: []string{"k1", "k2"}, Header: "X-Signature"}
	b64Src := Source{Name: "b", Kind: KindHMAC, Secrets: []string{"k1", "k2"}, Header: "X-Signature",
		Prefix: "sha256=", Encoding: EncodingBase64, TimestampHeader: "X-Timestamp"}
	b64 := func(secret, ts string) string {
		return "sha256=" + base64.StdEncoding.EncodeToString(sign(secret, []byte(ts+"."), testBody))
	}
	tol := int64(DefaultTolerance / time.Second)
	old := strconv.FormatInt(now-tol-1, 10)
	edge := strconv.FormatInt(now+tol, 10)

	tests := []struct {
		name    string
		src     Source
		h       http.Header
		wantErr string
	}{
		{name: "hex valid", src: hexSrc, h: hdr("X-Signature", hex.EncodeToString(sign("k1", testBody)))},
		{name: "hex rotation", src: hexSrc, h: hdr("X-Signature", hex.EncodeToString(sign("k2", testBody)))},
		{name: "hex wrong secret", src: hexSrc, h: hdr("X-Signature", hex.EncodeToString(sign("k3", testBody))), wantErr: "no secret matched"},
		{name: "hex missing header", src: hexSrc, h: hdr(), wantErr: "missing X-Signature"},
		{name: "hex malformed", src: hexSrc, h: hdr("X-Signature", "not-hex"), wantErr: "not a hex"},
		{name: "hex unexpected prefix", src: hexSrc, h: hdr("X-Signature", "sha256="+hex.EncodeToString(sign("k1", testBody))), wantErr: "not a hex"},
		{name: "b64 prefix timestamp valid", src: b64Src, h: hdr("X-Signature", b64("k1", ts), "X-Timestamp", ts)},
		{name: "b64 rotation", src: b64Src, h: hdr("X-Signature", b64("k2", ts), "X-Timestamp", ts)},
		{name: "b64 at boundary", src: b64Src, h: hdr("X-Signature", b64("k2", edge), "X-Timestamp", edge)},
		{name: "b64 stale timestamp", src: b64Src, h: hdr("X-Signature", b64("k1", old), "X-Timestamp", old), wantErr: "outside tolerance"},
		{name: "b64 timestamp swapped", src: b64Src, h: hdr("X-Signature", b64("k1", ts), "X-Timestamp", strconv.FormatInt(now-1, 10)), wantErr: "no secret matched"},
		{name: "b64 missing timestamp", src: b64Src, h: hdr("X-Signature", b64("k1", ts)), wantErr: "missing X-Timestamp"},
		{name: "b64 bad timestamp", src: b64Src, h: hdr("X-Signature", b64("k1", ts), "X-Timestamp", "soon"), wantErr: "not unix seconds"},
		{name: "b64 missing prefix", src: b64Src, h: hdr("X-Signature", b64("k1", ts)[len("sha256="):], "X-Timestamp", ts), wantErr: "missing prefix"},
		{name: "b64 malformed", src: b64Src, h: hdr("X-Signature", "sha256=!!!", "X-Timestamp", ts), wantErr: "not a base64"},
		{name: "b64 body only signature rejected", src: b64Src,
			h: hdr("X-Signature", "sha256="+base64.StdEncoding.EncodeToString(sign("k1", testBody)), "X-Timestamp", ts), wantErr: "no secret matched"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Verify(tc.src, tc.h, testBody, testNow)
			if tc.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, Delivery{}, d)
				return
			}
			require.ErrorIs(t, err, ErrBadSignature)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestVerifyNone(t *testing.T) {
	d, err := Verify(Source{Name: "n", Kind: KindNone, AllowUnsigned: true}, http.Header{}, testBody, testNow)
	require.NoError(t, err)
	require.Equal(t, Delivery{}, d)

	_, err = Verify(Source{Name: "n", Kind: KindNone}, http.Header{}, testBody, testNow)
	require.ErrorIs(t, err, ErrInvalidSource)
	require.NotErrorIs(t, err, ErrBadSignature)
	require.ErrorContains(t, err, "allow_unsigned")
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		src     Source
		wantErr string
	}{
		{name: "stripe ok", src: Source{Kind: KindStripe, Secrets: []string{"s"}}},
		{name: "github ok", src: Source{Kind: KindGitHub, Secrets: []string{"s"}}},
		{name: "hmac ok", src: Source{Kind: KindHMAC, Secrets: []string{"s"}, Header: "X-Sig", Encoding: EncodingBase64}},
		{name: "none ok", src: Source{Kind: KindNone, AllowUnsigned: true}},
		{name: "none without allow", src: Source{Kind: KindNone}, wantErr: "allow_unsigned"},
		{name: "empty kind", src: Source{Secrets: []string{"s"}}, wantErr: "kind is required"},
		{name: "unknown kind", src: Source{Kind: "slack", Secrets: []string{"s"}}, wantErr: `kind "slack" is unknown`},
		{name: "stripe no secrets", src: Source{Kind: KindStripe}, wantErr: "secrets"},
		{name: "github no secrets", src: Source{Kind: KindGitHub}, wantErr: "secrets"},
		{name: "hmac no secrets", src: Source{Kind: KindHMAC, Header: "X-Sig"}, wantErr: "secrets"},
		{name: "empty secret", src: Source{Kind: KindStripe, Secrets: []string{"a", ""}}, wantErr: "secrets[1] is empty"},
		{name: "hmac no header", src: Source{Kind: KindHMAC, Secrets: []string{"s"}}, wantErr: "header is required"},
		{name: "hmac bad encoding", src: Source{Kind: KindHMAC, Secrets: []string{"s"}, Header: "X", Encoding: "base32"}, wantErr: "encoding"},
		{name: "negative tolerance", src: Source{Kind: KindStripe, Secrets: []string{"s"}, Tolerance: -time.Second}, wantErr: "tolerance"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.src.Name = "src-" + tc.name
			err := tc.src.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
			require.ErrorContains(t, err, tc.src.Name)
		})
	}
}

func FuzzVerify(f *testing.F) {
	now := testNow.Unix()
	ts := strconv.FormatInt(now, 10)
	f.Add(stripeHeader("whsec", now, testBody), "", "", testBody)
	f.Add("t=1,v1=00,v1=zz", "sha256=abc", "1", []byte{})
	f.Add("t=9223372036854775807,v1="+hex.EncodeToString(make([]byte, 32)), "", "-1", []byte("x"))
	f.Add(",,==,t=,v1=", "sha256="+base64.StdEncoding.EncodeToString(sign("whsec", []byte(ts+"."), testBody)), ts, testBody)

	sources := []Source{
		{Name: "stripe", Kind: KindStripe, Secrets: []string{"whsec", "other"}},
		{Name: "hmac-hex", Kind: KindHMAC, Secrets: []string{"whsec"}, Header: "X-Signature"},
		{Name: "hmac-b64", Kind: KindHMAC, Secrets: []string{"whsec"}, Header: "X-Signature",
			Prefix: "sha256=", Encoding: EncodingBase64, TimestampHeader: "X-Timestamp", Tolerance: time.Hour},
	}
	f.Fuzz(func(t *testing.T, stripeSig, sig, tsHeader string, body []byte) {
		h := http.Header{}
		h.Set(HeaderStripeSignature, stripeSig)
		h.Set("X-Signature", sig)
		h.Set("X-Timestamp", tsHeader)
		for _, s := range sources {
			d, err := Verify(s, h, body, testNow)
			require.Equal(t, Delivery{}, d)
			if err != nil {
				require.ErrorIs(t, err, ErrBadSignature)
			}
		}
	})
}
