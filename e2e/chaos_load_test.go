//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// The load of a trial: keyed starts of the charge workflow, each sent to
// a random ingest, some with duplicate retries of the same key at once
// (to the other ingest) or later (to either). Every send retries as a
// client behind a load balancer would: a connection error, a timeout, a
// 429 or a 5xx is tried again, on the other ingest, until a deadline. A
// start is acknowledged once any of its key's answers was 2xx.

const (
	// dupNowRate and dupLaterRate are the shares of keys sent twice at
	// once, and sent again later.
	dupNowRate   = 0.35
	dupLaterRate = 0.35
	// laterMax bounds how long after its first send a key is sent again.
	laterMax = 2 * time.Second
)

// sendPlan is one client's send of a key: when, and to which ingest first.
type sendPlan struct {
	at     time.Duration
	ingest int
}

// keyPlan is one keyed start and its sends.
type keyPlan struct {
	key      string
	customer string
	amount   int64
	sends    []sendPlan
	// priority is the start's: the keys take every priority in turn, so
	// that tasks of each level (workflow and activity) and the worker's
	// ordered lanes carry the trials' faults.
	priority int
}

func (p keyPlan) body() string {
	return fmt.Sprintf(`{"input": {"amount_cents": %d, "customer_id": %q}, "priority": %d}`, p.amount, p.customer, p.priority)
}

func chargeBody(amount int64, customer string) string {
	return fmt.Sprintf(`{"input": {"amount_cents": %d, "customer_id": %q}}`, amount, customer)
}

// customerOf names the customer of a key, so each charge at the provider
// traces back to its start.
func customerOf(key string) string { return "cus_" + key }

// planLoad spreads n keyed starts with prefix over window.
func planLoad(rng *rand.Rand, prefix string, n int, window time.Duration) []keyPlan {
	plans := make([]keyPlan, n)
	for j := range plans {
		key := fmt.Sprintf("%sk%03d", prefix, j)
		at := time.Duration(rng.Int64N(int64(window)))
		first := rng.IntN(2)
		p := keyPlan{key: key, customer: customerOf(key), amount: 100 + rng.Int64N(9900), sends: []sendPlan{{at, first}}, priority: 1 + j%5}
		if rng.Float64() < dupNowRate {
			p.sends = append(p.sends, sendPlan{at, 1 - first})
		}
		if rng.Float64() < dupLaterRate {
			p.sends = append(p.sends, sendPlan{at + 200*time.Millisecond + time.Duration(rng.Int64N(int64(laterMax-200*time.Millisecond))), rng.IntN(2)})
		}
		plans[j] = p
	}
	return plans
}

// answer is one HTTP exchange.
type answer struct {
	send         int
	attempt      int
	ingest       int
	at           time.Time
	took         time.Duration
	status       int // 0: no answer
	err          string
	executionID  string
	commandID    string
	deduplicated bool
	code         string // the error code of a refusal
	retryAfter   string // the Retry-After header
}

func (a answer) ok() bool { return a.status >= 200 && a.status < 300 }

func (a answer) retryable() bool {
	return a.status == 0 || a.status == http.StatusTooManyRequests || a.status >= 500
}

func (a answer) String() string {
	s := fmt.Sprintf("%s send %d attempt %d ingest-%d took %s: ", a.at.Format("15:04:05.000"), a.send, a.attempt, a.ingest, a.took.Round(time.Millisecond))
	switch {
	case a.status == 0:
		return s + "no answer: " + a.err
	case a.ok():
		return s + fmt.Sprintf("%d execution_id=%s command_id=%s deduplicated=%v", a.status, a.executionID, a.commandID, a.deduplicated)
	default:
		return s + fmt.Sprintf("%d %s %s", a.status, a.code, a.err)
	}
}

// startRequest makes one start request of workflow to ingest i, keyed by
// key unless it is empty.
func (s *stack) startRequest(ctx context.Context, i int, workflow, key, body string) answer {
	a, _ := s.post(ctx, i, "/api/harvest/workflows/"+workflow+"/start", key, body)
	return a
}

// post makes one POST of body to ingest i's path, with the
// Idempotency-Key key unless it is empty, and reads what every command's
// answer says (its execution, command, deduplication, or refusal); it
// returns the answer and its body, for the caller's other members.
func (s *stack) post(ctx context.Context, i int, path, key, body string) (answer, []byte) {
	a := answer{ingest: i, at: time.Now()}
	defer func() { a.took = time.Since(a.at) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.baseURLs[i]+path, bytes.NewBufferString(body))
	if err != nil {
		a.err = err.Error()
		return a, nil
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		a.err = err.Error()
		a.took = time.Since(a.at)
		return a, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	a.status = resp.StatusCode
	a.retryAfter = resp.Header.Get("Retry-After")
	var out struct {
		ExecutionID  string `json:"execution_id"`
		CommandID    string `json:"command_id"`
		Deduplicated bool   `json:"deduplicated"`
		Error        string `json:"error"`
		Message      string `json:"message"`
	}
	if err := json.Unmarshal(data, &out); err != nil && a.ok() {
		a.err = fmt.Sprintf("answer is not JSON: %v: %q", err, data)
	}
	a.executionID, a.commandID, a.deduplicated, a.code = out.ExecutionID, out.CommandID, out.Deduplicated, out.Error
	if !a.ok() {
		a.err = out.Message
	}
	a.took = time.Since(a.at)
	return a, data
}

// sendRetrying sends until an answer is final or giveUp passes, switching
// ingest after each failed attempt, and records every answer.
func (s *stack) sendRetrying(ctx context.Context, first int, key, body string, giveUp time.Time, record func(answer)) answer {
	return s.startRetrying(ctx, "charge", first, key, body, giveUp, record)
}

// startRetrying is sendRetrying for a start of workflow.
func (s *stack) startRetrying(ctx context.Context, workflow string, first int, key, body string, giveUp time.Time, record func(answer)) answer {
	return retrying(ctx, first, len(s.baseURLs), giveUp, func(ingest, attempt int) answer {
		a := s.startRequest(ctx, ingest, workflow, key, body)
		a.attempt = attempt
		record(a)
		return a
	}, func(a answer) bool { return !a.retryable() })
}

// retrying makes attempts with try, at ingest first then the next one
// after each attempt that final says is not final, backing off with
// jitter from 100 ms to 1 s, until one is final, giveUp passes or ctx
// ends: it returns the last attempt's answer.
func retrying[A any](ctx context.Context, first, ingests int, giveUp time.Time, try func(ingest, attempt int) A, final func(A) bool) A {
	backoff := 100 * time.Millisecond
	ingest := first
	for attempt := 1; ; attempt++ {
		a := try(ingest, attempt)
		if final(a) || time.Now().After(giveUp) || ctx.Err() != nil {
			return a
		}
		wait := backoff/2 + rand.N(backoff/2+1) // jitter
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return a
		case <-timer.C:
		}
		backoff = min(2*backoff, time.Second)
		ingest = (ingest + 1) % ingests
	}
}

// keyOutcome is what the clients of one key heard.
type keyOutcome struct {
	plan    keyPlan
	mu      sync.Mutex
	answers []answer
}

func (k *keyOutcome) record(a answer) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.answers = append(k.answers, a)
}

// acked says whether any answer acknowledged the start.
func (k *keyOutcome) acked() bool {
	for _, a := range k.answers {
		if a.ok() {
			return true
		}
	}
	return false
}

// sendAt waits until at, the planned time of a send; false if ctx ended
// first.
func sendAt(ctx context.Context, at time.Time) bool {
	timer := time.NewTimer(time.Until(at))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// runLoad sends the planned starts; it returns once every send has an
// acknowledgement, a final refusal, or gave up at giveUp.
func (s *stack) runLoad(ctx context.Context, plans []keyPlan, giveUp time.Time) []*keyOutcome {
	begin := time.Now()
	outcomes := make([]*keyOutcome, len(plans))
	var wg sync.WaitGroup
	for j, p := range plans {
		k := &keyOutcome{plan: p}
		outcomes[j] = k
		for n, sp := range p.sends {
			wg.Go(func() {
				if !sendAt(ctx, begin.Add(sp.at)) {
					return
				}
				s.sendRetrying(ctx, sp.ingest, p.key, p.body(), giveUp, func(a answer) {
					a.send = n
					k.record(a)
				})
			})
		}
	}
	wg.Wait()
	return outcomes
}
