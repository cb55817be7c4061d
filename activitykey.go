package harvest

import "github.com/harvest-engine/harvest/internal/dedup"

// ActivityKey is the idempotency key of one logical activity invocation:
// the same for every attempt, redelivery and replay of the invocation
// (and for a worker that runs its first attempt eagerly), different for
// every other invocation. It is derived from the execution and the
// activity's position in it when the activity is first scheduled, and
// recorded in the execution's history. Hand it, or a Subkey, to
// downstream systems that deduplicate, such as Stripe's Idempotency-Key
// header; ActivityContext.IdempotencyKey returns it.
type ActivityKey string

// String returns the key as it goes into a header: a canonical UUID, or a
// UUID followed by subkey names.
func (k ActivityKey) String() string { return string(k) }

// Subkey derives a named key for one of several outbound calls an activity
// makes: "<parent>/<name>". It is deterministic, distinct from its parent,
// its siblings and the same name under another parent, and nestable. Bytes
// of name that are not printable ASCII, and '/' and '%', are
// percent-encoded; an empty name becomes "default".
func (k ActivityKey) Subkey(name string) ActivityKey {
	return ActivityKey(dedup.ActivityKey(k).Subkey(name))
}
