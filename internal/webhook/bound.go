package webhook

import (
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// HeaderHarvestSignature carries a signature bound to its request:
// "t=<unix seconds>,v1=<hex HMAC-SHA256>", the HMAC over the timestamp,
// the request's Target and its body (see SignBound).
const HeaderHarvestSignature = "X-Harvest-Signature"

// Target is what a bound signature covers besides its timestamp and the
// body: the request's method, its path as sent (run and binding, for an
// ArcFlow callback), and its idempotency key ("" for none). A signature
// made for one target verifies for no other, so a captured request cannot
// be replayed to another run, binding or key.
type Target struct {
	Method         string
	Path           string
	IdempotencyKey string
}

// boundPayload is what a bound signature's HMAC covers: the timestamp,
// the method, the path and the idempotency key, each followed by a line
// feed, then the body as sent. None of the four can hold a line feed
// (VerifyBound refuses one), so no two different requests sign the same
// bytes.
func boundPayload(ts string, t Target, body []byte) [][]byte {
	nl := []byte("\n")
	return [][]byte{[]byte(ts), nl, []byte(t.Method), nl, []byte(t.Path), nl, []byte(t.IdempotencyKey), nl, body}
}

// SignBound returns the X-Harvest-Signature value of a request to t with
// body, made at at under secret: what a sender puts in the header.
func SignBound(secret string, at time.Time, t Target, body []byte) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, boundPayload(ts, t, body)...))
}

// VerifyBound checks the X-Harvest-Signature of a request to t with body
// at time now: its timestamp must be within tolerance of now (zero means
// DefaultTolerance), and one of its v1 signatures the HMAC of the
// timestamp, t and body under one of secrets. Every error wraps
// ErrBadSignature. Items other than t and v1 are ignored, so that a
// sender may add a scheme of a later version beside v1.
func VerifyBound(secrets []string, tolerance time.Duration, h http.Header, t Target, body []byte, now time.Time) error {
	if len(secrets) == 0 {
		return badSig("no secret is configured")
	}
	if strings.ContainsAny(t.Method+t.Path+t.IdempotencyKey, "\r\n") {
		return badSig("the request's method, path or idempotency key holds a line break")
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	at, sigs, err := readTimestamped(h, HeaderHarvestSignature, tolerance, now)
	if err != nil {
		return err
	}
	if !anyMatch(secrets, sigs, boundPayload(strconv.FormatInt(at, 10), t, body)...) {
		return badSig("no secret matched the request's signature (it covers the method, path, idempotency key and body)")
	}
	return nil
}
