package callback

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultTimeout bounds one delivery attempt when NewClient is given a
// non-positive timeout.
const DefaultTimeout = 30 * time.Second

const (
	userAgent        = "harvest-callback/1"
	headerDeliveryID = "Harvest-Delivery-Id"
	maxDeliveryIDLen = 256
	maxDrainBytes    = 64 << 10
)

// DeliveryError is the error Deliver returns for every failed attempt.
type DeliveryError struct {
	// StatusCode is the receiver's HTTP status, or 0 if no response
	// was received (a network error or a refusal before sending).
	StatusCode int
	// Retryable reports whether a later attempt may succeed: true for
	// 5xx, 408, 425, 429 and network errors; false for other statuses,
	// for targets refused by the policy (errors.Is(err, ErrRejected))
	// and for invalid arguments.
	Retryable bool
	// RetryAfter is the receiver's Retry-After hint on a retryable
	// status, capped at the maximum RetryDelay; 0 if absent or invalid.
	RetryAfter time.Duration
	// Err is the underlying cause.
	Err error
}

func (e *DeliveryError) Error() string {
	kind := "permanent"
	if e.Retryable {
		kind = "retryable"
	}
	if e.StatusCode != 0 {
		return fmt.Sprintf("callback delivery failed (%s, status %d): %v", kind, e.StatusCode, e.Err)
	}
	return fmt.Sprintf("callback delivery failed (%s): %v", kind, e.Err)
}

// Unwrap returns the underlying cause.
func (e *DeliveryError) Unwrap() error { return e.Err }

// Reason says why the attempt failed in words that may be stored and shown
// to whoever chose the URL (a delivery's last_error): the receiver's
// status, a refused target's Reason, or the category of a network failure
// ("name does not resolve", "connection refused", "timed out", "TLS
// failure", ...). It never quotes an address the resolver answered, the
// resolver's own address or Go's error text; Error keeps those, for the
// log.
func (e *DeliveryError) Reason() string {
	var rej *RejectedError
	switch {
	case errors.As(e.Err, &rej):
		return rej.Reason
	case e.StatusCode != 0:
		return strings.TrimSpace(fmt.Sprintf("receiver answered %d %s", e.StatusCode, http.StatusText(e.StatusCode)))
	}
	return failureReason(e.Err)
}

// errInvalidDelivery is wrapped by the errors of a delivery that could not
// be attempted at all: the scheduler's fault or its configuration's, not
// the target's.
var errInvalidDelivery = errors.New("callback: invalid delivery")

// failureReason is the category of a delivery that got no answer.
func failureReason(err error) string {
	var (
		dnsErr    *net.DNSError
		netErr    net.Error
		verifyErr *tls.CertificateVerificationError
		recordErr tls.RecordHeaderError
		alertErr  tls.AlertError
		authErr   x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		certErr   x509.CertificateInvalidError
	)
	switch {
	case errors.Is(err, errInvalidDelivery):
		return "invalid delivery (the scheduler's log says why)"
	case errors.As(err, &dnsErr):
		switch {
		case dnsErr.IsNotFound:
			return "name does not resolve"
		case dnsErr.IsTimeout:
			return "name lookup timed out"
		}
		return "name lookup failed"
	case errors.Is(err, errNoAddresses):
		return "name does not resolve"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timed out"
	case errors.As(err, &verifyErr), errors.As(err, &recordErr), errors.As(err, &alertErr),
		errors.As(err, &authErr), errors.As(err, &hostErr), errors.As(err, &certErr):
		return "TLS failure"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "host unreachable"
	}
	return "network error"
}

// Client delivers callbacks. It is safe for concurrent use; share one.
//
// Every connection is checked against the Policy when it is dialled: the
// dialer resolves the host with Policy.Resolver, refuses it unless every
// address is public or allow-listed, and connects only to those checked
// addresses (and a net.Dialer Control hook re-checks the socket address).
// A host allow-listed by name is resolved and checked too: none of its
// addresses may be a metadata address that no entry names exactly.
// Environment proxies are ignored and redirects are not followed.
type Client struct {
	allow    allowList
	allowErr error
	resolver Resolver
	tr       *http.Transport
	hc       *http.Client
}

// NewClient returns a Client enforcing p. timeout bounds each Deliver call
// end to end (connect, send, response headers and body drain); a
// non-positive timeout means DefaultTimeout.
func NewClient(p Policy, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	allow, err := compileAllow(p.AllowHosts)
	c := &Client{allow: allow, allowErr: err, resolver: p.resolver()}
	c.tr = &http.Transport{
		Proxy:                  nil, // a proxy would connect for us, past the checks
		DialContext:            c.dialContext,
		ForceAttemptHTTP2:      true,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    10 * time.Second,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	c.hc = &http.Client{
		Transport: c.tr,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	return c
}

// CloseIdleConnections closes idle keep-alive connections, e.g. at shutdown.
func (c *Client) CloseIdleConnections() { c.tr.CloseIdleConnections() }

// Deliver POSTs body, which must be JSON, to rawURL with the headers
// Content-Type: application/json, User-Agent: harvest-callback/1 and
// Harvest-Delivery-Id: deliveryID. Pass the same deliveryID on every retry
// of one callback so the receiver can deduplicate; it must be 1 to 256
// visible ASCII characters.
//
// A 2xx response means delivered and Deliver returns nil. Anything else is
// a *DeliveryError: see its Retryable field. A 3xx response is not followed
// and is refused like a forbidden target (wrapping ErrRejected, not
// retryable). A cancelled ctx yields a retryable error; the caller decides
// whether to try again.
func (c *Client) Deliver(ctx context.Context, rawURL, deliveryID string, body []byte) error {
	if c.allowErr != nil {
		return &DeliveryError{Err: fmt.Errorf("%w: %w", errInvalidDelivery, c.allowErr)}
	}
	if err := checkDeliveryID(deliveryID); err != nil {
		return &DeliveryError{Err: fmt.Errorf("%w: %w", errInvalidDelivery, err)}
	}
	if !json.Valid(body) {
		return &DeliveryError{Err: fmt.Errorf("%w: body is not valid JSON", errInvalidDelivery)}
	}
	t, err := parseTarget(rawURL)
	if err != nil {
		return &DeliveryError{Err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.u.String(), bytes.NewReader(body))
	if err != nil {
		return &DeliveryError{Err: rejectf("invalid URL: %v", err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set(headerDeliveryID, deliveryID)

	resp, err := c.hc.Do(req)
	if err != nil {
		return &DeliveryError{Retryable: !errors.Is(err, ErrRejected), Err: err}
	}
	defer func() {
		// Drain a little so the connection can be reused, then close.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrainBytes))
		_ = resp.Body.Close()
	}()

	code := resp.StatusCode
	switch {
	case code >= 200 && code <= 299:
		return nil
	case code >= 300 && code <= 399:
		return &DeliveryError{StatusCode: code, Err: &RejectedError{
			Reason: fmt.Sprintf("redirect (status %d) not followed: callback receivers must answer directly", code),
			detail: fmt.Sprintf("redirect (status %d) to %q not followed: callback receivers must answer directly", code, resp.Header.Get("Location")),
		}}
	}
	de := &DeliveryError{
		StatusCode: code,
		Retryable:  retryableStatus(code),
		Err:        fmt.Errorf("callback: receiver answered %d %s", code, http.StatusText(code)),
	}
	if de.Retryable {
		de.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return de
}

func retryableStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return code >= 500
}

func checkDeliveryID(id string) error {
	if id == "" || len(id) > maxDeliveryIDLen {
		return fmt.Errorf("callback: delivery id must be 1 to %d bytes, got %d", maxDeliveryIDLen, len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("callback: delivery id contains byte %#x; want visible ASCII", c)
		}
	}
	return nil
}

// parseRetryAfter reads a Retry-After value (delay-seconds or HTTP-date),
// clamped to [0, maxDelay].
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs > int64(maxDelay/time.Second) {
			return maxDelay
		}
		d = time.Duration(secs) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	}
	return min(max(d, 0), maxDelay)
}

// dialContext is the transport's only way out: it resolves the host
// itself, checks every address against the policy and dials the checked
// addresses only, each re-checked by the dialer's Control hook on the
// socket's own address just before it connects.
func (c *Client) dialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("callback: dial %q: %w", address, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, rejectf("invalid port %q", portStr)
	}
	host = normalizeHost(host)
	byName := c.allow.hostAllowed(host)

	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		if err := c.allow.checkLiteral(a); err != nil {
			return nil, err
		}
		addrs = []netip.Addr{a}
	} else {
		if addrs, err = lookup(ctx, c.resolver, host); err != nil {
			return nil, err
		}
		if err := c.allow.checkAddrs(host, addrs, byName); err != nil {
			return nil, err
		}
	}

	d := &net.Dialer{KeepAlive: 30 * time.Second, Control: c.control(byName)}
	var errs []error
	for _, a := range addrs {
		conn, err := d.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		if errors.Is(err, ErrRejected) || ctx.Err() != nil {
			return nil, err
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// control returns the dialer's Control hook: it re-checks the address the
// socket is about to connect to, with byName saying whether the URL's host
// is allow-listed by name.
func (c *Client) control(byName bool) func(network, address string, _ syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &RejectedError{Reason: "the dialled address cannot be checked",
				detail: fmt.Sprintf("cannot check dialled address %q: %v", address, err)}
		}
		if r := c.allow.refusal(ap.Addr(), byName); r != "" {
			return &RejectedError{Reason: "private address",
				detail: fmt.Sprintf("dialled address %s is not public (%s)", ap.Addr(), r)}
		}
		return nil
	}
}
