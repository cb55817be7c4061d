// Package webhook verifies incoming webhook requests against their raw body,
// before anything is parsed.
//
// A [Source] describes one configured sender (Stripe, GitHub, a generic HMAC
// signer, or an explicitly unsigned source). [Verify] checks the request
// headers and the exact bytes received against that configuration and, on
// success, returns the [Delivery] metadata that can be read from the headers.
// Signature failures wrap [ErrBadSignature]; a verified GitHub request
// lacking its delivery metadata wraps [ErrMissingHeader].
//
// [VerifyBound] checks a signature bound to its request ([HeaderHarvestSignature]):
// besides the body and a timestamp it covers the method, the path and the
// idempotency key, so that a captured request cannot be replayed to
// another target; ingest uses it for ArcFlow callbacks, and [SignBound]
// makes one.
//
// Every secret listed in a source is tried, so secrets can be rotated by
// adding the new one before removing the old one. All signature comparisons
// are constant-time.
//
// It is pure: no NATS, no PostgreSQL, no clock but the one a caller
// passes; internal/ingest serves the route and publishes what it decides.
package webhook
