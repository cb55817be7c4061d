// Package fakepay is an in-process stand-in for a payment provider that
// honours Idempotency-Key the way Stripe does: a request repeated with the
// same key and the same parameters returns the original charge instead of
// charging again; the same key with different parameters is refused. The
// examples use it to show what an activity's idempotency key buys.
//
// It knows nothing of Harvest and must not import any of its packages.
package fakepay
