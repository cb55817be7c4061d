package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Source kinds.
const (
	KindStripe = "stripe"
	KindGitHub = "github"
	KindHMAC   = "hmac"
	KindNone   = "none"
)

// Encodings for Kind "hmac".
const (
	EncodingHex    = "hex"
	EncodingBase64 = "base64"
)

// DefaultTolerance is the timestamp tolerance used when Source.Tolerance is
// zero.
const DefaultTolerance = 5 * time.Minute

// Header names used by the built-in kinds.
const (
	HeaderStripeSignature = "Stripe-Signature"
	HeaderGitHubSignature = "X-Hub-Signature-256"
	HeaderGitHubDelivery  = "X-GitHub-Delivery"
	HeaderGitHubEvent     = "X-GitHub-Event"
)

var (
	// ErrBadSignature is wrapped by every error reporting a missing,
	// malformed, stale or non-matching signature.
	ErrBadSignature = errors.New("bad or missing webhook signature")
	// ErrMissingHeader is wrapped (with the header name) when a request is
	// correctly signed but lacks a header the kind requires.
	ErrMissingHeader = errors.New("missing required webhook header")
	// ErrInvalidSource is wrapped by Verify when the Source fails Validate.
	ErrInvalidSource = errors.New("invalid webhook source")
)

// Source is one configured webhook source.
type Source struct {
	Name string `json:"name" yaml:"name"`
	// Kind is one of "stripe", "github", "hmac" or "none".
	Kind string `json:"kind" yaml:"kind"`
	// Secrets are all accepted at once, to allow rotation (stripe, github,
	// hmac).
	Secrets []string `json:"secrets" yaml:"secrets"`
	// Tolerance bounds |now - timestamp| for stripe, and for hmac when
	// TimestampHeader is set. Zero means DefaultTolerance.
	Tolerance time.Duration `json:"tolerance" yaml:"tolerance"`

	// Header carries the signature (hmac only), e.g. "X-Signature".
	Header string `json:"header" yaml:"header"`
	// Prefix optionally precedes the signature, e.g. "sha256=" (hmac only).
	Prefix string `json:"prefix" yaml:"prefix"`
	// Encoding of the signature: "hex" (default) or "base64" (hmac only).
	Encoding string `json:"encoding" yaml:"encoding"`
	// TimestampHeader optionally names a header carrying a unix-seconds
	// timestamp (hmac only). When set, the signed payload is
	// "<timestamp>.<body>" and the timestamp must be within Tolerance.
	TimestampHeader string `json:"timestamp_header" yaml:"timestamp_header"`
	// AllowUnsigned must be true for Kind "none".
	AllowUnsigned bool `json:"allow_unsigned" yaml:"allow_unsigned"`
}

// Delivery is what a verified request yields. For github it carries the
// X-GitHub-Delivery and X-GitHub-Event headers; for stripe the caller parses
// "id" and "type" from the verified body; for hmac and none it is empty.
type Delivery struct {
	ID        string
	EventType string
}

// Validate reports the first configuration problem, naming the bad field.
func (s Source) Validate() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("webhook source %q: "+format, append([]any{s.Name}, args...)...)
	}
	if s.Tolerance < 0 {
		return fail("tolerance must not be negative (got %s)", s.Tolerance)
	}
	switch s.Kind {
	case KindStripe, KindGitHub, KindHMAC:
		if len(s.Secrets) == 0 {
			return fail("secrets: kind %q requires at least one secret", s.Kind)
		}
		for i, sec := range s.Secrets {
			if sec == "" {
				return fail("secrets[%d] is empty", i)
			}
		}
	case KindNone:
		if !s.AllowUnsigned {
			return fail("allow_unsigned must be true for kind %q", KindNone)
		}
		return nil
	case "":
		return fail("kind is required")
	default:
		return fail("kind %q is unknown (want stripe, github, hmac or none)", s.Kind)
	}
	if s.Kind == KindHMAC {
		if s.Header == "" {
			return fail("header is required for kind %q", KindHMAC)
		}
		switch s.Encoding {
		case "", EncodingHex, EncodingBase64:
		default:
			return fail("encoding %q is unknown (want hex or base64)", s.Encoding)
		}
	}
	return nil
}

func (s Source) tolerance() time.Duration {
	if s.Tolerance == 0 {
		return DefaultTolerance
	}
	return s.Tolerance
}

// Verify checks the request headers h and the raw body against s at time now.
// It returns an error wrapping ErrInvalidSource if s fails Validate,
// ErrBadSignature if the signature is missing, malformed, stale or matches no
// secret, and ErrMissingHeader if a signed github request lacks its delivery
// or event header.
func Verify(s Source, h http.Header, body []byte, now time.Time) (Delivery, error) {
	if err := s.Validate(); err != nil {
		return Delivery{}, fmt.Errorf("%w: %w", ErrInvalidSource, err)
	}
	switch s.Kind {
	case KindStripe:
		return Delivery{}, verifyStripe(s, h, body, now)
	case KindGitHub:
		return verifyGitHub(s, h, body)
	case KindHMAC:
		return Delivery{}, verifyHMAC(s, h, body, now)
	default: // KindNone, enforced by Validate.
		return Delivery{}, nil
	}
}

func badSig(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadSignature}, args...)...)
}

// singleHeader returns the only value of name; absent, empty or repeated
// headers are rejected so that there is never ambiguity about what was
// verified.
func singleHeader(h http.Header, name string) (string, error) {
	vals := h.Values(name)
	switch {
	case len(vals) == 0 || (len(vals) == 1 && vals[0] == ""):
		return "", badSig("missing %s header", name)
	case len(vals) > 1:
		return "", badSig("malformed %s header: repeated", name)
	}
	return vals[0], nil
}

func mac(secret string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// anyMatch reports whether any candidate signature equals the HMAC of the
// payload under any secret. Every pair is compared, in constant time.
func anyMatch(secrets []string, candidates [][]byte, parts ...[]byte) bool {
	ok := false
	for _, sec := range secrets {
		want := mac(sec, parts...)
		for _, c := range candidates {
			if hmac.Equal(want, c) {
				ok = true
			}
		}
	}
	return ok
}

// parseUnix parses a unix-seconds timestamp made only of ASCII digits.
func parseUnix(v string) (int64, bool) {
	if v == "" || len(v) > 19 {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}

// checkTimestamp enforces |now - ts| <= tol without overflowing.
// readTimestamped reads the request's one header named header, a
// t=<unix seconds>,v1=<hex>… signature (parseTimestamped), and checks
// that its timestamp is within tol of now: the steps Stripe's signature
// and Harvest's bound one share. It returns the timestamp and the
// signatures.
func readTimestamped(h http.Header, header string, tol time.Duration, now time.Time) (int64, [][]byte, error) {
	v, err := singleHeader(h, header)
	if err != nil {
		return 0, nil, err
	}
	at, sigs, err := parseTimestamped(header, v)
	if err != nil {
		return 0, nil, err
	}
	if err := checkTimestamp(at, tol, now); err != nil {
		return 0, nil, err
	}
	return at, sigs, nil
}

func checkTimestamp(ts int64, tol time.Duration, now time.Time) error {
	d := now.Sub(time.Unix(ts, 0)) // saturates at the Duration bounds
	if d > tol || d < -tol {
		return badSig("timestamp %d outside tolerance %s (skew %s)", ts, tol, d)
	}
	return nil
}

func verifyStripe(s Source, h http.Header, body []byte, now time.Time) error {
	t, sigs, err := readTimestamped(h, HeaderStripeSignature, s.tolerance(), now)
	if err != nil {
		return err
	}
	if !anyMatch(s.Secrets, sigs, []byte(strconv.FormatInt(t, 10)), []byte("."), body) {
		return badSig("no secret matched")
	}
	return nil
}

func verifyGitHub(s Source, h http.Header, body []byte) (Delivery, error) {
	v, err := singleHeader(h, HeaderGitHubSignature)
	if err != nil {
		return Delivery{}, err
	}
	hexSig, ok := strings.CutPrefix(v, "sha256=")
	if !ok {
		return Delivery{}, badSig("malformed %s header: missing sha256= prefix", HeaderGitHubSignature)
	}
	sig, err := hex.DecodeString(hexSig)
	if err != nil || len(sig) != sha256.Size {
		return Delivery{}, badSig("malformed %s header: not a hex SHA-256 signature", HeaderGitHubSignature)
	}
	if !anyMatch(s.Secrets, [][]byte{sig}, body) {
		return Delivery{}, badSig("no secret matched")
	}
	d := Delivery{ID: h.Get(HeaderGitHubDelivery), EventType: h.Get(HeaderGitHubEvent)}
	if d.ID == "" {
		return Delivery{}, fmt.Errorf("%w: %s", ErrMissingHeader, HeaderGitHubDelivery)
	}
	if d.EventType == "" {
		return Delivery{}, fmt.Errorf("%w: %s", ErrMissingHeader, HeaderGitHubEvent)
	}
	return d, nil
}

func verifyHMAC(s Source, h http.Header, body []byte, now time.Time) error {
	v, err := singleHeader(h, s.Header)
	if err != nil {
		return err
	}
	enc, ok := strings.CutPrefix(v, s.Prefix)
	if !ok {
		return badSig("malformed %s header: missing prefix %q", s.Header, s.Prefix)
	}
	var sig []byte
	if s.Encoding == EncodingBase64 {
		sig, err = base64.StdEncoding.Strict().DecodeString(enc)
	} else {
		sig, err = hex.DecodeString(enc)
	}
	if err != nil || len(sig) != sha256.Size {
		return badSig("malformed %s header: not a %s SHA-256 signature", s.Header, encodingName(s.Encoding))
	}
	parts := [][]byte{body}
	if s.TimestampHeader != "" {
		tsv, err := singleHeader(h, s.TimestampHeader)
		if err != nil {
			return err
		}
		ts, ok := parseUnix(tsv)
		if !ok {
			return badSig("malformed %s header: %q is not unix seconds", s.TimestampHeader, tsv)
		}
		if err := checkTimestamp(ts, s.tolerance(), now); err != nil {
			return err
		}
		parts = [][]byte{[]byte(tsv), []byte("."), body}
	}
	if !anyMatch(s.Secrets, [][]byte{sig}, parts...) {
		return badSig("no secret matched")
	}
	return nil
}

func encodingName(e string) string {
	if e == "" {
		return EncodingHex
	}
	return e
}

// parseTimestamped parses a "t=<unix>,v1=<hex>[,v1=…]" header, as Stripe
// sends Stripe-Signature and Harvest X-Harvest-Signature: the timestamp
// in its one canonical spelling (no sign, no leading zero: senders sign
// the timestamp reformatted, so only that form is the bytes received)
// and every v1 signature; other schemes are ignored.
func parseTimestamped(header, v string) (int64, [][]byte, error) {
	var (
		ts     string
		haveTS bool
		sigs   [][]byte
	)
	for item := range strings.SplitSeq(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || k == "" {
			return 0, nil, badSig("malformed %s header: item %q is not key=value", header, item)
		}
		switch k {
		case "t":
			if haveTS {
				return 0, nil, badSig("malformed %s header: repeated t", header)
			}
			ts, haveTS = val, true
		case "v1":
			b, err := hex.DecodeString(val)
			if err != nil || len(b) != sha256.Size {
				return 0, nil, badSig("malformed %s header: v1 is not a hex SHA-256 signature", header)
			}
			sigs = append(sigs, b)
		}
	}
	if !haveTS {
		return 0, nil, badSig("malformed %s header: missing t", header)
	}
	t, ok := parseUnix(ts)
	if !ok || strconv.FormatInt(t, 10) != ts {
		return 0, nil, badSig("malformed %s header: t %q is not unix seconds", header, ts)
	}
	if len(sigs) == 0 {
		return 0, nil, badSig("malformed %s header: no v1 signature", header)
	}
	return t, sigs, nil
}
