package dedup

import (
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// ActivityKey is the idempotency key of one logical activity invocation. It
// is derived from the execution and the activity's id when the activity is
// first scheduled (ActivityKeyFor), and recorded in the execution's
// history, so every attempt, redelivery and replay reads the same value,
// and so does a worker that runs the first attempt eagerly, before the
// scheduler has recorded it. Hand it (or a Subkey) to downstream systems that deduplicate,
// such as Stripe's Idempotency-Key header.
type ActivityKey string

// NewActivityKey mints a fresh key: a canonical UUID string, header-safe and
// free of input data.
func NewActivityKey() ActivityKey {
	return ActivityKey(uuid.NewString())
}

// activityKeySpace is the UUID namespace of derived activity keys.
var activityKeySpace = uuid.MustParse("5b0c1d3e-7a47-4c55-9e0a-6f2d8e1b4a90")

// ActivityKeyFor derives the key of activity activityID of execution
// executionID: a name-based (version 5) UUID, so the same invocation
// always gets the same key and distinct invocations distinct ones.
func ActivityKeyFor(executionID string, activityID int) ActivityKey {
	return ActivityKey(uuid.NewSHA1(activityKeySpace, []byte(executionID+"#"+strconv.Itoa(activityID))).String())
}

// String returns the key as it goes into a header.
func (k ActivityKey) String() string { return string(k) }

// Subkey derives a named key for one of several outbound calls an activity
// makes: "<parent>/<name>". It is deterministic, distinct from its parent,
// its siblings and the same name under another parent, and nestable. Bytes
// of name that are not printable ASCII, and '/' and '%', are
// percent-encoded; an empty name becomes "default".
func (k ActivityKey) Subkey(name string) ActivityKey {
	if name == "" {
		name = "default"
	}
	return ActivityKey(string(k) + "/" + escapeSubkey(name))
}

func escapeSubkey(name string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c > ' ' && c < 0x7f && c != '/' && c != '%' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	return b.String()
}
