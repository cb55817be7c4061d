package harvest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/workerrt"
)

// ErrNoLedger is returned by Once outside an activity run by a Worker.
var ErrNoLedger = errors.New("no effect ledger: Once runs inside activities of a started Worker")

// ledgerEntry is one key of the effect ledger: running (leased to one
// attempt until Until) or done (with the recorded result).
type ledgerEntry struct {
	State  string          `json:"state"`
	Owner  string          `json:"owner,omitempty"`
	Until  time.Time       `json:"until,omitzero"`
	Result json.RawMessage `json:"result,omitempty"`
}

// onceLease bounds how long one caller holds a key it is running, when its
// context has no earlier deadline; after it, another caller may run the
// effect (its first run having died with its worker).
const onceLease = 5 * time.Minute

// Once runs fn at most once per key across all workers and restarts, for
// effects on downstream systems that cannot deduplicate themselves: the
// first caller runs fn and records its result durably; later callers with
// the key get the recorded result without running fn. Derive keys from
// the activity's idempotency key (ctx.IdempotencyKey().Subkey("email")).
//
// If fn fails, nothing is recorded and a later caller runs it again. A
// caller that finds the key running waits for the result, up to ctx's
// deadline; if the runner's lease lapses (its worker died mid-effect), the
// waiter runs fn itself: an effect interrupted mid-way may then run twice,
// which only the downstream system can rule out.
//
// The ledger keeps a result for the deployment's retention (`retention`,
// default 7 days) after the last call that ran or found it: a call with
// the key longer than that after the previous one runs fn again. The
// attempts of one activity come while its execution runs, minutes apart
// under any usual retry policy, so only calls months apart, or keys
// shared across executions, can outlast it.
func Once[T any](ctx *ActivityContext, key ActivityKey, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	if ctx.ledger == nil {
		return zero, ErrNoLedger
	}
	kv, k := ctx.ledger, ledgerKey(key)
	owner := fmt.Sprintf("%s/%d/%d", ctx.info.ExecutionID, ctx.info.ActivityID, ctx.info.Attempt)
	backoff := 20 * time.Millisecond
	for {
		e, err := kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			rev, err := kv.Create(ctx, k, leaseEntry(ctx, owner))
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // another caller got there first
			}
			if err != nil {
				return zero, fmt.Errorf("once %s: take the key: %w", key, err)
			}
			ctx.usedLedger(workerrt.LedgerRun)
			return runOnce(ctx, kv, k, rev, fn)
		case err != nil:
			return zero, fmt.Errorf("once %s: read the ledger: %w", key, err)
		}
		var le ledgerEntry
		if err := json.Unmarshal(e.Value(), &le); err != nil {
			return zero, fmt.Errorf("once %s: decode the ledger: %w", key, err)
		}
		if le.State == "done" {
			var out T
			if err := json.Unmarshal(le.Result, &out); err != nil {
				return zero, fmt.Errorf("once %s: decode the recorded result: %w", key, err)
			}
			// The ledger's entries expire the deployment's retention
			// after they were last written (broker.Config.Retention).
			// Writing this one again keeps it that long after its last
			// use, however long the activity's attempts go on. A refresh
			// that fails (another caller refreshed it first, NATS is
			// away) changes nothing for this call.
			_, _ = kv.Update(ctx, k, e.Value(), e.Revision())
			ctx.usedLedger(workerrt.LedgerHit)
			return out, nil
		}
		if time.Now().After(le.Until) {
			// The runner's lease lapsed: take the key over.
			rev, err := kv.Update(ctx, k, leaseEntry(ctx, owner), e.Revision())
			if err == nil {
				ctx.usedLedger(workerrt.LedgerTakeover)
				return runOnce(ctx, kv, k, rev, fn)
			}
			continue
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, fmt.Errorf("once %s: waiting for another run: %w", key, ctx.Err())
		case <-t.C:
		}
		backoff = min(backoff*2, time.Second)
	}
}

func leaseEntry(ctx *ActivityContext, owner string) []byte {
	until := time.Now().Add(onceLease)
	if d, ok := ctx.Deadline(); ok && d.Before(until) {
		until = d
	}
	data, _ := json.Marshal(ledgerEntry{State: "running", Owner: owner, Until: until})
	return data
}

func runOnce[T any](ctx *ActivityContext, kv jetstream.KeyValue, k string, rev uint64, fn func(context.Context) (T, error)) (T, error) {
	out, err := fn(ctx)
	if err != nil {
		// Let a later caller try again.
		_ = kv.Delete(context.WithoutCancel(ctx), k, jetstream.LastRevision(rev))
		return out, err
	}
	result, err := json.Marshal(out)
	if err != nil {
		return out, fmt.Errorf("once: encode the result: %w", err)
	}
	data, _ := json.Marshal(ledgerEntry{State: "done", Result: result})
	if _, err := kv.Put(context.WithoutCancel(ctx), k, data); err != nil {
		return out, fmt.Errorf("once: record the result: %w", err)
	}
	return out, nil
}

// ledgerKey turns an activity key into a bucket key: KV keys allow only
// letters, digits and - _ / = . , so the key is hashed.
func ledgerKey(key ActivityKey) string {
	return dedup.Fingerprint(mustJSON(key.String()))
}

func mustJSON(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}
