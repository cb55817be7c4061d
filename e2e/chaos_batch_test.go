//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The chaos suite's load of batch operations (docs/batches.md): each
// trial starts a few collect executions (two items each), keyed, with
// workflow_ids under the trial's prefix. Once they are acknowledged and
// applied, one batch signals every collect under that prefix the item
// {"sku": "batch"}, at 2 executions a second so that the trial's faults
// land while it runs. The batch is POSTed under an Idempotency-Key,
// retried through either ingest until it is answered, and sometimes
// twice at once through both: every answer must name one batch. The load waits
// for the batch to complete and sends each execution its own second
// item, keyed. After the trial the batch must have completed, matched
// every execution created before it and done each (failed none), and
// each of those must have received the batch's item exactly once: a
// batch that sent an execution its operation again (a cursor that did not
// advance with its send, a report counted twice) shows.

const workflowCollect = "collect"

var chaosBatch = flag.Int("chaos.batch", 4, "chaos: collect executions per trial that one batch signals under faults (0: no batch)")

// batchPlan is a trial's batch: its executions' starts, when the batch
// is sent, through which ingest, and whether twice at once.
type batchPlan struct {
	starts []sideStart
	// prefix is the executions' workflow_id prefix, key the batch's
	// Idempotency-Key.
	prefix, key string
	at          time.Duration
	ingest      int
	twice       bool
}

// planBatch plans a batch over n executions: the starts in the first
// quarter of window, the batch in the second. It draws from its own
// generator, so that the other loads' and the faults' draws of a seed
// stay as they were.
func planBatch(seed uint64, kind, prefix string, n int, window time.Duration) *batchPlan {
	if n == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, fnv64(kind+"/batch")))
	p := &batchPlan{prefix: "batch-" + prefix, key: "batch-" + prefix + "op", ingest: rng.IntN(2), twice: rng.IntN(2) == 0}
	for j := range n {
		key := fmt.Sprintf("%sb%02d", p.prefix, j)
		body, _ := json.Marshal(map[string]any{"workflow_id": key, "input": map[string]int{"count": 2}})
		p.starts = append(p.starts, sideStart{key: key, body: string(body), at: time.Duration(rng.Int64N(int64(window/4) + 1)), ingest: rng.IntN(2)})
	}
	p.at = window/4 + time.Duration(rng.Int64N(int64(window/4)+1))
	return p
}

// batchOutcome is what the batch load's client heard.
type batchOutcome struct {
	plan   *batchPlan
	starts []*startOutcome
	// ids are the executions of the acknowledged starts, by key.
	ids map[string]string
	mu  sync.Mutex
	// answers are the batch requests' answers, batchIDs the batches their
	// 201s named.
	answers  []answer
	batchIDs []string
	// completed says the client saw the batch completed.
	completed bool
	// own are the answers of each execution's own item, by key.
	own map[string][]signalAnswer
}

func (o *batchOutcome) record(a answer, data []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.answers = append(o.answers, a)
	if a.status != http.StatusCreated && a.status != http.StatusOK {
		return
	}
	var b struct {
		BatchID string `json:"batch_id"`
	}
	if json.Unmarshal(data, &b) == nil && b.BatchID != "" && !slices.Contains(o.batchIDs, b.BatchID) {
		o.batchIDs = append(o.batchIDs, b.BatchID)
	}
}

// batchRequest is the batch's body.
func (p *batchPlan) batchRequest() string {
	raw, _ := json.Marshal(map[string]any{"operation": "signal", "reason": "chaos", "rate": 2,
		"filter": map[string]string{"workflow": workflowCollect, "workflow_id_prefix": p.prefix},
		"signal": map[string]any{"name": "item", "payload": map[string]string{"sku": "batch"}}})
	return string(raw)
}

// runBatch starts the executions, sends the batch once they are applied,
// waits for it to complete and sends each execution its own item. The
// starts give up at giveUp, the rest at laterGiveUp.
func (s *stack) runBatch(ctx context.Context, p *batchPlan, giveUp, laterGiveUp time.Time) *batchOutcome {
	o := &batchOutcome{plan: p, ids: map[string]string{}, own: map[string][]signalAnswer{}}
	if p == nil {
		return o
	}
	begin := time.Now()
	o.starts = s.runSideStarts(ctx, workflowCollect, p.starts, giveUp)
	for j, st := range o.starts {
		var id, accepted string
		for _, a := range st.answers {
			if a.ok() && id == "" {
				id = a.executionID
			}
			if a.ok() && a.executionID == "" && a.commandID != "" {
				accepted = a.commandID
			}
		}
		if id == "" && accepted != "" {
			id = s.appliedExecution(ctx, accepted, laterGiveUp)
		}
		if id != "" {
			o.ids[p.starts[j].key] = id
		}
	}
	if !sendAt(ctx, begin.Add(p.at)) {
		return o
	}
	send := func(ingest int) {
		retrying(ctx, ingest, len(s.baseURLs), laterGiveUp, func(ingest, attempt int) answer {
			a, data := s.post(ctx, ingest, "/api/harvest/batches", p.key, p.batchRequest())
			a.attempt = attempt
			o.record(a, data)
			return a
		}, func(a answer) bool {
			return a.status == http.StatusCreated || a.status == http.StatusOK || !a.retryable()
		})
	}
	if p.twice {
		var both sync.WaitGroup
		both.Go(func() { send(p.ingest) })
		both.Go(func() { send(1 - p.ingest) })
		both.Wait()
	} else {
		send(p.ingest)
	}
	if len(o.batchIDs) != 1 {
		return o
	}
	id := o.batchIDs[0]
	state := retrying(ctx, p.ingest, len(s.baseURLs), laterGiveUp, func(ingest, _ int) string {
		var b struct {
			State string `json:"state"`
		}
		if ok, err := s.scheduleGet(ctx, ingest, "/api/harvest/batches/"+id, &b); !ok || err != nil {
			return ""
		}
		return b.State
	}, func(state string) bool { return state == "completed" || state == "cancelled" })
	o.completed = state == "completed"
	if !o.completed {
		return o
	}
	for key, execution := range o.ids {
		var answers []signalAnswer
		s.signalRetrying(ctx, p.ingest, execution, "item", key+"-own", `{"sku": "own"}`, laterGiveUp,
			func(a signalAnswer) { answers = append(answers, a) })
		o.own[key] = answers
	}
	return o
}

// batchExecution is a collect of the batch load as PostgreSQL holds it.
type batchExecution struct {
	id, workflowID, status string
	createdAt              time.Time
	// batchItems counts its SignalReceived items from the batch, items
	// all of them.
	batchItems, items int
}

// batchExecutions reads the batch load's executions.
func (c *trialCheck) batchExecutions(ctx context.Context, prefix string) ([]batchExecution, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out []batchExecution
	err := c.st.queryAll(qctx, `
		SELECT e.execution_id::text, e.workflow_id, e.status, e.created_at,
			(SELECT count(*) FROM history_events h WHERE h.execution_id = e.execution_id AND h.type = 'SignalReceived'
				AND h.attrs->>'signal_name' = 'item' AND h.attrs->'payload'->>'sku' = 'batch'),
			(SELECT count(*) FROM history_events h WHERE h.execution_id = e.execution_id AND h.type = 'SignalReceived')
		FROM executions e WHERE e.workflow_name = $1 AND starts_with(e.workflow_id, $2)`,
		[]any{workflowCollect, prefix}, func(rows pgx.Rows) error {
			var b batchExecution
			if err := rows.Scan(&b.id, &b.workflowID, &b.status, &b.createdAt, &b.batchItems, &b.items); err != nil {
				return err
			}
			out = append(out, b)
			return nil
		})
	return out, err
}

// batchRow is the batch as PostgreSQL holds it, its parts (one in each
// store) summed.
type batchRow struct {
	parts, completed      int
	matched, done, failed int64
	// createdAt is when ingest took it: it matches the executions created
	// before.
	createdAt time.Time
}

func (c *trialCheck) readBatch(ctx context.Context, id string) (batchRow, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var b batchRow
	err := c.st.queryAll(qctx, `
		SELECT count(*), count(*) FILTER (WHERE state = 'completed'), coalesce(sum(matched), 0), coalesce(sum(done), 0),
			coalesce(sum(failed), 0), coalesce(min((spec->>'before')::timestamptz), 'epoch')
		FROM batches WHERE batch_id = $1`, []any{id}, func(rows pgx.Rows) error {
		// A row from each store: its parts, summed here.
		var parts, completed, matched, done, failed int64
		var created time.Time
		if err := rows.Scan(&parts, &completed, &matched, &done, &failed, &created); err != nil {
			return err
		}
		b.parts += int(parts)
		b.completed += int(completed)
		b.matched, b.done, b.failed = b.matched+matched, b.done+done, b.failed+failed
		if parts > 0 && (b.createdAt.IsZero() || created.Before(b.createdAt)) {
			b.createdAt = created
		}
		return nil
	})
	return b, err
}

// batchInvariants checks the trial's batch: see the top of this file.
func (c *trialCheck) batchInvariants(ctx context.Context, o *batchOutcome) {
	if o.plan == nil {
		return
	}
	var bad []string
	wrong := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if len(o.batchIDs) > 1 {
		wrong("the batch's answers named %d batches: %v", len(o.batchIDs), o.batchIDs)
	}
	if len(o.batchIDs) == 0 {
		if len(o.ids) > 0 {
			var last string
			if n := len(o.answers); n > 0 {
				last = o.answers[n-1].String()
			}
			wrong("the batch was never answered 201 (%d requests; last: %s)", len(o.answers), last)
		}
		c.failBatch(bad)
		return
	}
	id := o.batchIDs[0]
	deadline := time.Now().Add(c.cfg.bound)
	var row batchRow
	var execs []batchExecution
	var err error
	for {
		row, err = c.readBatch(ctx, id)
		if err == nil {
			execs, err = c.batchExecutions(ctx, o.plan.prefix)
		}
		done := err == nil && row.parts > 0 && row.completed == row.parts
		for _, e := range execs {
			if _, ours := o.own[e.workflowID]; ours && slices.ContainsFunc(o.own[e.workflowID], func(a signalAnswer) bool { return a.acks(false) }) {
				done = done && e.status == "Completed"
			}
		}
		if done || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond) // poll interval, not synchronisation
	}
	if err != nil {
		c.res.fail("batch: read it: %v", err)
		return
	}
	if row.parts == 0 || row.completed != row.parts {
		wrong("batch %s: %d of its %d parts completed", id, row.completed, row.parts)
	}
	var before int64
	for _, e := range execs {
		if !e.createdAt.Before(row.createdAt) {
			continue // created after the batch: not its to match
		}
		before++
		if e.batchItems != 1 {
			wrong("execution %s (%s) received the batch's item %d times", e.id, e.workflowID, e.batchItems)
		}
		if e.status == "Completed" && e.items != 2 {
			wrong("execution %s (%s) completed with %d items, want 2", e.id, e.workflowID, e.items)
		}
	}
	for key, execution := range o.ids {
		if !slices.ContainsFunc(execs, func(e batchExecution) bool { return e.id == execution }) {
			wrong("acknowledged start %s's execution %s is not there", key, execution)
		}
	}
	if row.matched != before || row.done != before || row.failed != 0 {
		wrong("batch %s matched %d, done %d, failed %d: want the %d executions created before it, each done", id, row.matched, row.done, row.failed, before)
	}
	if len(bad) == 0 {
		c.res.BatchDone += int(row.done)
		c.res.BatchRequests += len(o.answers)
	}
	c.failBatch(bad)
}

func (c *trialCheck) failBatch(bad []string) {
	if len(bad) > 0 {
		c.res.Other += len(bad)
		c.res.fail("batch: %d wrong: %s", len(bad), strings.Join(bad, "; "))
	}
}
