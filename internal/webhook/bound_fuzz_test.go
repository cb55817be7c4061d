package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/webhook"
)

// FuzzBoundSignatureHeader feeds any X-Harvest-Signature value, path,
// key and body:
//   - a value VerifyBound accepts has a canonical t within the tolerance
//     and a v1 that is the HMAC, under one of the secrets, of t, the
//     method, path and key, each followed by a line feed, then the body,
//     computed here independently of SignBound;
//   - every refusal wraps ErrBadSignature;
//   - SignBound's own header verifies for a target without line breaks,
//     and not for another path or key, nor past the tolerance.
func FuzzBoundSignatureHeader(f *testing.F) {
	now := time.Unix(1_700_000_000, 0)
	target := webhook.Target{Method: "POST", Path: "/v1/runs/0199a3e4-7c4b-7d1a-9c2e-5b6f7a8b9c0d/external/item", IdempotencyKey: "delivery-1"}
	body := []byte(`{"sku": "A-1"}`)
	f.Add(webhook.SignBound("s2", now, target, body), target.Path, target.IdempotencyKey, body)
	f.Add("t=1700000000,v1="+strings.Repeat("0", 64), target.Path, "", []byte{})
	f.Add("t=1700000000,v1=zz,v1="+strings.Repeat("ab", 32), "/", "k\n1", []byte(".5"))
	f.Add("t=01700000000,v0=x", "/a", "k", []byte("1.5"))
	f.Add(" t=1700000000 , v1= ", "/v1/runs/x/external/y", "k\r", []byte("\x00"))
	f.Add("t=,t=1,v1=", "", "", []byte(nil))

	secrets := []string{"s1", "s2"}
	f.Fuzz(func(t *testing.T, sig, path, key string, body []byte) {
		tg := webhook.Target{Method: "POST", Path: path, IdempotencyKey: key}
		h := http.Header{webhook.HeaderHarvestSignature: {sig}}
		err := webhook.VerifyBound(secrets, 0, h, tg, body, now)
		if err != nil {
			require.True(t, errors.Is(err, webhook.ErrBadSignature), "%v", err)
		} else {
			require.True(t, signedByHand(sig, secrets, tg, body, now), "VerifyBound accepts %q", sig)
		}

		if strings.ContainsAny(path+key, "\r\n") {
			require.Error(t, err, "a target with a line break never verifies")
			return
		}
		good := webhook.SignBound("s1", now, tg, body)
		require.NoError(t, webhook.VerifyBound(secrets, 0, http.Header{webhook.HeaderHarvestSignature: {good}}, tg, body, now))
		other := tg
		other.Path += "x"
		require.Error(t, webhook.VerifyBound(secrets, 0, http.Header{webhook.HeaderHarvestSignature: {good}}, other, body, now))
		other = tg
		other.IdempotencyKey += "x"
		require.Error(t, webhook.VerifyBound(secrets, 0, http.Header{webhook.HeaderHarvestSignature: {good}}, other, body, now))
		require.Error(t, webhook.VerifyBound(secrets, 0, http.Header{webhook.HeaderHarvestSignature: {good}}, tg, body, now.Add(webhook.DefaultTolerance+time.Second)))
	})
}

// signedByHand says whether sig holds one canonical t within the default
// tolerance of now and a v1 matching the documented bytes under a secret.
func signedByHand(sig string, secrets []string, tg webhook.Target, body []byte, now time.Time) bool {
	var ts string
	var sigs []string
	for item := range strings.SplitSeq(sig, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(item), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != ts || n < 0 {
		return false
	}
	if d := now.Sub(time.Unix(n, 0)); d > webhook.DefaultTolerance || d < -webhook.DefaultTolerance {
		return false
	}
	for _, s := range secrets {
		m := hmac.New(sha256.New, []byte(s))
		m.Write([]byte(ts + "\n" + tg.Method + "\n" + tg.Path + "\n" + tg.IdempotencyKey + "\n"))
		m.Write(body)
		want := m.Sum(nil)
		for _, v := range sigs {
			if got, err := hex.DecodeString(v); err == nil && hmac.Equal(got, want) {
				return true
			}
		}
	}
	return false
}
