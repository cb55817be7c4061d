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
// An [Endpoint] is a source with its payload schema and routing rules: a
// [Rule] turns a verified event of one type into a start or a
// signal-with-start command, its input and workflow id taken from the
// event by JSON Pointer.
//
// Every secret listed in a source is tried, so secrets can be rotated by
// adding the new one before removing the old one. All signature comparisons
// are constant-time.
//
// It is pure: no NATS, no PostgreSQL, no clock but the one a caller
// passes; internal/ingest serves the route and publishes what it decides.
package webhook

// Where things are:
//
//   - webhook.go: Source, Verify, and each provider's signature scheme;
//     add a kind of source there.
//   - bound.go: bound signatures (X-Harvest-Signature): SignBound,
//     VerifyBound.
//   - routing.go: Endpoint, Rule, JSON Pointers and the templates they
//     fill, and the command a rule makes.
