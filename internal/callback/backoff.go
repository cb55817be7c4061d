package callback

import (
	"math/rand/v2"
	"time"
)

// DefaultMaxAttempts is the default number of delivery attempts, the first
// included, before a callback is abandoned.
const DefaultMaxAttempts = 10

const (
	baseDelay = time.Second
	maxDelay  = 10 * time.Minute
)

// RetryDelay returns how long to wait before delivery attempt n (the first
// attempt is 1 and has no delay). For n >= 2 the nominal delay is
// 1s·2^(n-2) capped at 10 minutes, and a random jitter of up to 20% is
// subtracted, so the result lies in [0.8·nominal, nominal] and never
// exceeds 10 minutes. With DefaultMaxAttempts the nominal delays add up to
// 511s. Safe for concurrent use.
func RetryDelay(attempt int) time.Duration {
	if attempt < 2 {
		return 0
	}
	d := maxDelay
	if n := attempt - 2; n < 30 {
		if e := baseDelay << n; e < maxDelay {
			d = e
		}
	}
	return d - time.Duration(rand.Int64N(int64(d)/5+1)) //nolint:gosec // G404: jitter, not a secret
}
