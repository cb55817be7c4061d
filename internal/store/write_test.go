package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// newDB returns a pool on a fresh database with one shard.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	db := pgtest.NewPool(t)
	require.NoError(t, store.EnsureShards(context.Background(), db, 1))
	return db
}

// write runs store.Write in a transaction of its own.
func write(t *testing.T, db *pgxpool.Pool, w *store.Writes) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return store.Write(ctx, tx, w) }))
}

func queryInt(t *testing.T, db store.DBTX, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// at is a time PostgreSQL stores exactly (microseconds, UTC).
func at(d time.Duration) time.Time {
	return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(d).Truncate(time.Microsecond)
}

func ptr[T any](v T) *T { return &v }

func newExecution(t *testing.T) *store.Execution {
	t.Helper()
	return &store.Execution{
		ExecutionID: dedup.NewID(), WorkflowName: "wf", WorkflowID: dedup.NewID(), TaskQueue: "q", Status: wire.StatusRunning,
		Input: json.RawMessage(`{"n": 1}`), CreatedAt: at(0), UpdatedAt: at(0), Versioning: wire.VersioningAutoUpgrade,
	}
}

// JSON values in these tests are written as jsonb prints them, so that
// what is read back compares equal.

func TestWriteInsertsRowsWithTheirNulls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)

	full := newExecution(t)
	full.Status, full.Result, full.Error = wire.StatusCompleted, json.RawMessage(`{"ok": true}`), json.RawMessage(`{"type": "x"}`)
	full.LastSeq, full.WFTID, full.WFTOutstanding, full.WFTDirty = 3, 2, true, true
	full.IdempotencyKey, full.CompletionCallback, full.ClosedAt = ptr("key-1"), ptr("https://example.com/cb"), ptr(at(time.Second))
	full.Versioning, full.PinnedBuild, full.Priority = wire.VersioningPinned, "v1.2.0+abc~12345678", 5
	bare := newExecution(t)
	bare.Input, bare.Priority = nil, wire.DefaultPriority // 0 is stored as the default
	jsonNull := newExecution(t)
	jsonNull.Result, jsonNull.Priority = json.RawMessage(`null`), 1 // JSON null, not SQL NULL
	execs := []*store.Execution{full, bare, jsonNull}

	w := &store.Writes{Shard: 0, AppliedSeq: 42, NewExecutions: execs}
	for _, e := range execs {
		for seq := 1; seq <= 2; seq++ {
			w.Events = append(w.Events, store.EventRow{ExecutionID: e.ExecutionID, Event: wire.Event{
				Seq: seq, Type: fmt.Sprintf("T%d", seq), At: at(time.Duration(seq) * time.Millisecond), Attrs: json.RawMessage(fmt.Sprintf(`{"s":%d}`, seq)),
			}})
		}
	}
	acts := []*store.Activity{
		{ExecutionID: full.ExecutionID, ActivityID: 1, ActivityName: "a", Status: store.ActivityScheduled, Attempt: 1, IdempotencyKey: "ak1",
			Input: json.RawMessage(`[1]`), Options: json.RawMessage(`{"o": 1}`), ScheduledAt: at(time.Minute)},
		{ExecutionID: bare.ExecutionID, ActivityID: 7, ActivityName: "b", Status: store.ActivityScheduled, Attempt: 2, IdempotencyKey: "ak2",
			Options: json.RawMessage(`{}`), ScheduledAt: at(2 * time.Minute)},
	}
	w.NewActivities = acts
	w.NewTimers = []store.Timer{
		{ExecutionID: full.ExecutionID, Kind: store.TimerWorkflow, FireAt: at(time.Hour), Attrs: json.RawMessage(`{"timer_id":"t1"}`)},
		{ExecutionID: bare.ExecutionID, Kind: store.TimerStart, FireAt: at(2 * time.Hour), Attrs: json.RawMessage(`{}`)},
	}
	w.SignalClaims = []store.SignalRef{{ExecutionID: full.ExecutionID, IdempotencyKey: "s1"}, {ExecutionID: full.ExecutionID, IdempotencyKey: "s2"}}
	w.Callbacks = []store.CallbackDelivery{
		{ExecutionID: full.ExecutionID, URL: "https://first", Payload: json.RawMessage(`{"n":1}`)},
		{ExecutionID: full.ExecutionID, URL: "https://second", Payload: json.RawMessage(`{"n":2}`)}, // ON CONFLICT DO NOTHING: the first stays
		{ExecutionID: bare.ExecutionID, URL: "https://bare", Payload: json.RawMessage(`{"n":3}`)},
	}
	write(t, db, w)

	for _, want := range execs {
		got, err := store.GetExecution(ctx, db, want.ExecutionID)
		require.NoError(t, err)
		require.True(t, want.CreatedAt.Equal(got.CreatedAt) && want.UpdatedAt.Equal(got.UpdatedAt))
		got.CreatedAt, got.UpdatedAt = want.CreatedAt, want.UpdatedAt
		if want.ClosedAt != nil {
			require.NotNil(t, got.ClosedAt)
			require.True(t, want.ClosedAt.Equal(*got.ClosedAt))
			got.ClosedAt = want.ClosedAt
		}
		require.Equal(t, want, got)

		history, err := store.GetHistory(ctx, db, want.ExecutionID)
		require.NoError(t, err)
		require.Len(t, history, 2)
		for i, ev := range history {
			require.Equal(t, i+1, ev.Seq)
			require.Equal(t, fmt.Sprintf("T%d", i+1), ev.Type)
			require.True(t, at(time.Duration(i+1)*time.Millisecond).Equal(ev.At))
			require.JSONEq(t, fmt.Sprintf(`{"s":%d}`, i+1), string(ev.Attrs))
		}
	}
	require.Equal(t, 1, queryInt(t, db, `SELECT count(*) FROM executions WHERE execution_id = $1 AND input IS NULL`, bare.ExecutionID))
	require.Equal(t, 1, queryInt(t, db, `SELECT count(*) FROM executions WHERE execution_id = $1 AND result = 'null'::jsonb`, jsonNull.ExecutionID))

	require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		got, err := store.LoadActivities(ctx, tx, []store.ActivityRef{{full.ExecutionID, 1}, {bare.ExecutionID, 7}})
		require.NoError(t, err)
		for _, want := range acts {
			a := got[store.ActivityRef{ExecutionID: want.ExecutionID, ActivityID: want.ActivityID}]
			require.NotNil(t, a)
			require.True(t, want.ScheduledAt.Equal(a.ScheduledAt))
			a.ScheduledAt = want.ScheduledAt
			require.Equal(t, want, a)
		}
		claims, err := store.LoadSignalClaims(ctx, tx, append(w.SignalClaims, store.SignalRef{ExecutionID: bare.ExecutionID, IdempotencyKey: "s1"}))
		require.NoError(t, err)
		require.Equal(t, map[store.SignalRef]bool{w.SignalClaims[0]: true, w.SignalClaims[1]: true}, claims)
		return nil
	}))

	require.Equal(t, 1, queryInt(t, db, `SELECT count(*) FROM timers WHERE shard = 0 AND execution_id = $1 AND kind = 'workflow'
		AND fire_at = $2 AND attrs = '{"timer_id":"t1"}'`, full.ExecutionID, at(time.Hour)))
	require.Equal(t, 1, queryInt(t, db, `SELECT count(*) FROM timers WHERE shard = 0 AND execution_id = $1 AND kind = 'start'
		AND fire_at = $2 AND attrs = '{}'`, bare.ExecutionID, at(2*time.Hour)))
	require.Equal(t, 2, queryInt(t, db, `SELECT count(*) FROM timers`))

	require.Equal(t, 1, queryInt(t, db, `SELECT count(*) FROM callback_deliveries WHERE execution_id = $1 AND url = 'https://first' AND shard = 0`, full.ExecutionID))
	require.Equal(t, 2, queryInt(t, db, `SELECT count(*) FROM callback_deliveries`))
	require.Equal(t, 42, queryInt(t, db, `SELECT applied_seq FROM shard_offsets WHERE shard = 0`))
}

func TestWriteUpdatesTheLastStateOfEachRow(t *testing.T) {
	t.Parallel()
	// A few rows are updated one statement each, many in one statement.
	for _, count := range []int{1, store.SetBasedUpdateRows + 2} {
		t.Run(fmt.Sprintf("executions=%d", count), func(t *testing.T) {
			t.Parallel()
			testWriteUpdates(t, count)
		})
	}
}

func testWriteUpdates(t *testing.T, count int) {
	ctx := context.Background()
	db := newDB(t)
	var execs []*store.Execution
	setup := &store.Writes{}
	for range count {
		e := newExecution(t)
		execs = append(execs, e)
		setup.NewExecutions = append(setup.NewExecutions, e)
		setup.NewActivities = append(setup.NewActivities,
			&store.Activity{ExecutionID: e.ExecutionID, ActivityID: 1, ActivityName: "a", Status: store.ActivityScheduled, Attempt: 1,
				IdempotencyKey: dedup.NewID(), Options: json.RawMessage(`{}`), ScheduledAt: at(0)},
			&store.Activity{ExecutionID: e.ExecutionID, ActivityID: 2, ActivityName: "b", Status: store.ActivityScheduled, Attempt: 1,
				IdempotencyKey: dedup.NewID(), Options: json.RawMessage(`{}`), ScheduledAt: at(0), HeartbeatDetails: json.RawMessage(`{"p": 1}`),
				LastHeartbeatAt: ptr(at(time.Second))})
	}
	write(t, db, setup)

	// Two versions of every row in one batch: the later one stands.
	w := &store.Writes{}
	var laterExecs []*store.Execution
	var laterActs []*store.Activity
	for i, e := range execs {
		earlier, later := *e, *e
		earlier.Status, earlier.LastSeq = wire.StatusRunning, 5
		later.Status, later.Result, later.LastSeq, later.WFTID, later.WFTOutstanding = wire.StatusCompleted, json.RawMessage(fmt.Sprintf(`{"r": %d}`, i)), 6, 3, true
		later.UpdatedAt, later.ClosedAt = at(time.Minute), ptr(at(time.Minute))
		w.UpdatedExecutions = append(w.UpdatedExecutions, &earlier)
		laterExecs = append(laterExecs, &later)

		done, alive := *setup.NewActivities[2*i], *setup.NewActivities[2*i+1]
		w.UpdatedActivities = append(w.UpdatedActivities, setup.NewActivities[2*i+1], setup.NewActivities[2*i])
		done.Status, done.Attempt = store.ActivityCompleted, 2
		alive.Attempt, alive.HeartbeatDetails, alive.LastHeartbeatAt, alive.OutcomeUnknown = 3, nil, nil, true
		laterActs = append(laterActs, &alive, &done)
	}
	w.UpdatedExecutions = append(w.UpdatedExecutions, laterExecs...)
	w.UpdatedActivities = append(w.UpdatedActivities, laterActs...)
	write(t, db, w)

	for i, e := range execs {
		got, err := store.GetExecution(ctx, db, e.ExecutionID)
		require.NoError(t, err)
		require.Equal(t, wire.StatusCompleted, got.Status)
		require.JSONEq(t, fmt.Sprintf(`{"r": %d}`, i), string(got.Result))
		require.Nil(t, got.Error)
		require.Equal(t, 6, got.LastSeq)
		require.Equal(t, 3, got.WFTID)
		require.True(t, got.WFTOutstanding)
		require.True(t, at(time.Minute).Equal(got.UpdatedAt))
		require.NotNil(t, got.ClosedAt)
		require.True(t, at(time.Minute).Equal(*got.ClosedAt))

		var (
			status    string
			attempt   int
			closed    bool
			details   json.RawMessage
			heartbeat *time.Time
			unknown   bool
		)
		scan := func(id int) {
			require.NoError(t, db.QueryRow(ctx, `SELECT status, attempt, closed_at IS NOT NULL, heartbeat_details, last_heartbeat_at, outcome_unknown
				FROM activities WHERE execution_id = $1 AND activity_id = $2`, e.ExecutionID, id).Scan(&status, &attempt, &closed, &details, &heartbeat, &unknown))
		}
		scan(1)
		require.Equal(t, store.ActivityCompleted, status)
		require.Equal(t, 2, attempt)
		require.True(t, closed, "a finished activity gets closed_at")
		scan(2)
		require.Equal(t, store.ActivityScheduled, status)
		require.Equal(t, 3, attempt)
		require.False(t, closed, "a scheduled activity has no closed_at")
		require.Nil(t, details)
		require.Nil(t, heartbeat)
		require.True(t, unknown)
	}
}

func TestWriteDeletesTimers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	a, b, c := newExecution(t), newExecution(t), newExecution(t)
	actAttrs := func(id, attempt int) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"activity_id":%d,"attempt":%d}`, id, attempt))
	}
	timer := func(e *store.Execution, kind string, attrs json.RawMessage) store.Timer {
		return store.Timer{ExecutionID: e.ExecutionID, Kind: kind, FireAt: at(time.Hour), Attrs: attrs}
	}
	write(t, db, &store.Writes{NewExecutions: []*store.Execution{a, b, c}, NewTimers: []store.Timer{
		timer(a, store.TimerActivityTimeout, actAttrs(1, 1)),
		timer(a, store.TimerActivityRetry, actAttrs(1, 2)),
		timer(a, store.TimerActivityHeartbeat, actAttrs(1, 1)),
		timer(a, store.TimerActivityTimeout, actAttrs(2, 1)),
		timer(a, store.TimerWorkflow, json.RawMessage(`{"timer_id":"1"}`)),
		timer(a, store.TimerStart, json.RawMessage(`{}`)),
		timer(b, store.TimerActivityTimeout, actAttrs(1, 1)),
		timer(b, store.TimerWorkflow, json.RawMessage(`{"timer_id":"1"}`)),
		timer(c, store.TimerStart, json.RawMessage(`{}`)),
		timer(c, store.TimerWorkflow, json.RawMessage(`{"timer_id":"2"}`)),
	}})
	var fired int64
	require.NoError(t, db.QueryRow(ctx, `SELECT timer_id FROM timers WHERE execution_id = $1 AND kind = 'start'`, c.ExecutionID).Scan(&fired))

	write(t, db, &store.Writes{
		// Set in this batch for an activity that also finished in it: the
		// deletions run after the inserts, so it goes too.
		NewTimers:        []store.Timer{timer(a, store.TimerActivityTimeout, actAttrs(1, 3))},
		ActivityDone:     []store.ActivityRef{{ExecutionID: a.ExecutionID, ActivityID: 1}},
		ExecutionsClosed: []string{b.ExecutionID},
		FiredTimers:      []int64{fired},
	})

	rows, err := db.Query(ctx, `SELECT execution_id::text, kind, attrs::text FROM timers ORDER BY execution_id, kind`)
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var id, kind, attrs string
		err := r.Scan(&id, &kind, &attrs)
		return fmt.Sprintf("%s %s %s", map[string]string{a.ExecutionID: "a", b.ExecutionID: "b", c.ExecutionID: "c"}[id], kind, attrs), err
	})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{
		`a activity_timeout {"attempt": 1, "activity_id": 2}`,
		`a start {}`,
		`a workflow {"timer_id": "1"}`,
		`c workflow {"timer_id": "2"}`,
	}, left)
}

func TestWriteOutboxIDsFollowTheSlice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	var msgs []*store.OutboxMsg
	for i := range 300 {
		msgs = append(msgs, &store.OutboxMsg{Shard: 0, Subject: fmt.Sprintf("s.%d", i%7), MsgID: fmt.Sprintf("m%d", i), Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))})
	}
	write(t, db, &store.Writes{AppliedSeq: 1, Outbox: msgs[:1]})
	write(t, db, &store.Writes{AppliedSeq: 2, Outbox: msgs[1:]})

	stored, err := store.PendingOutbox(ctx, db, 0, 1000)
	require.NoError(t, err)
	require.Len(t, stored, len(msgs))
	for i, m := range msgs {
		if i > 0 {
			require.Greater(t, m.ID, msgs[i-1].ID, "ids ascend along the slice")
		}
		require.Equal(t, *m, *stored[i], "row %d", i)
	}

	// Published rows go in a later batch's transaction.
	var published []int64
	for _, m := range msgs[:100] {
		published = append(published, m.ID)
	}
	write(t, db, &store.Writes{AppliedSeq: 3, PublishedOutbox: published})
	stored, err = store.PendingOutbox(ctx, db, 0, 1000)
	require.NoError(t, err)
	require.Len(t, stored, 200)
	require.Equal(t, msgs[100].ID, stored[0].ID)
	require.Equal(t, 3, queryInt(t, db, `SELECT applied_seq FROM shard_offsets WHERE shard = 0`))
}

func TestClaimStartKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	claim := func(window time.Duration, claims ...store.NewClaim) map[store.ClaimRef]store.Claim {
		t.Helper()
		var out map[store.ClaimRef]store.Claim
		require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			var err error
			out, err = store.ClaimStartKeys(ctx, tx, claims, window)
			return err
		}))
		return out
	}
	newClaim := func(key string) store.NewClaim {
		return store.NewClaim{ClaimRef: store.ClaimRef{WorkflowName: "wf", IdempotencyKey: key}, ExecutionID: dedup.NewID(), Fingerprint: "f-" + key}
	}
	live, expired := newClaim("live"), newClaim("expired")
	claim(time.Hour, live)
	claim(-time.Hour, expired)

	fresh, live2, expired2 := newClaim("fresh"), newClaim("live"), newClaim("expired")
	got := claim(time.Hour, fresh, live2, expired2)
	require.Len(t, got, 3)
	require.Equal(t, fresh.ExecutionID, got[fresh.ClaimRef].ExecutionID)
	require.Equal(t, "f-fresh", got[fresh.ClaimRef].Fingerprint)
	require.Equal(t, live.ExecutionID, got[live.ClaimRef].ExecutionID, "a live claim stays with its holder")
	require.Equal(t, expired2.ExecutionID, got[expired.ClaimRef].ExecutionID, "an expired claim is taken over")
	require.True(t, got[expired.ClaimRef].ExpiresAt.After(time.Now()))

	// Repointed and deleted in a batch.
	other := dedup.NewID()
	write(t, db, &store.Writes{
		RepointClaims: map[store.ClaimRef]string{fresh.ClaimRef: other},
		DeleteClaims:  []store.ClaimRef{expired.ClaimRef},
	})
	require.Equal(t, 1, queryInt(t, db, `SELECT count(*) FROM start_claims WHERE idempotency_key = 'fresh' AND execution_id = $1`, other))
	require.Equal(t, 0, queryInt(t, db, `SELECT count(*) FROM start_claims WHERE idempotency_key = 'expired'`))
	require.Equal(t, 1, queryInt(t, db, `SELECT count(*) FROM start_claims WHERE idempotency_key = 'live' AND execution_id = $1`, live.ExecutionID))
}

// TestClaimStartKeysSeesAConcurrentHolder covers the claim that a
// concurrent transaction commits while ClaimStartKeys waits on it: the
// INSERT then conflicts with a row its statement's snapshot does not show.
func TestClaimStartKeysSeesAConcurrentHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	holder := store.NewClaim{ClaimRef: store.ClaimRef{WorkflowName: "wf", IdempotencyKey: "k"}, ExecutionID: dedup.NewID()}
	other := store.NewClaim{ClaimRef: holder.ClaimRef, ExecutionID: dedup.NewID()}

	first, err := db.Begin(ctx)
	require.NoError(t, err)
	defer first.Rollback(context.WithoutCancel(ctx))
	_, err = store.ClaimStartKeys(ctx, first, []store.NewClaim{holder}, time.Hour)
	require.NoError(t, err)

	type result struct {
		claims map[store.ClaimRef]store.Claim
		err    error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			var err error
			r.claims, err = store.ClaimStartKeys(ctx, tx, []store.NewClaim{other}, time.Hour)
			return err
		})
		done <- r
	}()
	require.Eventually(t, func() bool {
		return queryInt(t, db, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) == 1
	}, 10*time.Second, 5*time.Millisecond, "the second claim waits for the first transaction")
	require.NoError(t, first.Commit(ctx))

	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, holder.ExecutionID, r.claims[holder.ClaimRef].ExecutionID)
}

// statementCounter counts the statements of the batches a pool sends.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}
func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TestWriteSendsOneStatementPerKind holds Write to one statement per kind
// of row, however many rows there are.
func TestWriteSendsOneStatementPerKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(t))
	require.NoError(t, err)
	counter := &statementCounter{}
	cfg.ConnConfig.Tracer = counter
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	require.NoError(t, store.EnsureShards(ctx, db, 1))

	writes := func(n int) *store.Writes {
		w := &store.Writes{AppliedSeq: int64(n), RepointClaims: map[store.ClaimRef]string{}}
		for i := range n {
			e := newExecution(t)
			a := &store.Activity{ExecutionID: e.ExecutionID, ActivityID: 1, ActivityName: "a", Status: store.ActivityScheduled, Attempt: 1,
				IdempotencyKey: dedup.NewID(), Options: json.RawMessage(`{}`), ScheduledAt: at(0)}
			key := store.ClaimRef{WorkflowName: "wf", IdempotencyKey: fmt.Sprintf("k%d", i)}
			w.NewExecutions = append(w.NewExecutions, e)
			w.UpdatedExecutions = append(w.UpdatedExecutions, e)
			w.Events = append(w.Events, store.EventRow{ExecutionID: e.ExecutionID, Event: wire.Event{Seq: 1, Type: "T", At: at(0), Attrs: json.RawMessage(`{}`)}})
			w.NewActivities = append(w.NewActivities, a)
			w.UpdatedActivities = append(w.UpdatedActivities, a)
			w.RepointClaims[key] = e.ExecutionID
			w.DeleteClaims = append(w.DeleteClaims, key)
			w.NewTimers = append(w.NewTimers, store.Timer{ExecutionID: e.ExecutionID, Kind: store.TimerStart, FireAt: at(0), Attrs: json.RawMessage(`{}`)})
			w.ActivityDone = append(w.ActivityDone, store.ActivityRef{ExecutionID: e.ExecutionID, ActivityID: 1})
			w.ExecutionsClosed = append(w.ExecutionsClosed, e.ExecutionID)
			w.FiredTimers = append(w.FiredTimers, int64(i))
			w.SignalClaims = append(w.SignalClaims, store.SignalRef{ExecutionID: e.ExecutionID, IdempotencyKey: "s"})
			w.Callbacks = append(w.Callbacks, store.CallbackDelivery{ExecutionID: e.ExecutionID, URL: "https://cb", Payload: json.RawMessage(`{}`)})
			w.Outbox = append(w.Outbox, &store.OutboxMsg{Subject: "s", MsgID: dedup.NewID(), Payload: []byte(`{}`)})
			w.PublishedOutbox = append(w.PublishedOutbox, int64(i))
		}
		return w
	}
	// One per field of Writes that holds rows (ActivityDone and
	// ExecutionsClosed share their DELETE), and the offset update.
	const kinds = 15
	for _, n := range []int{1, store.SetBasedUpdateRows, 50} {
		before := counter.n.Load()
		write(t, db, writes(n))
		require.Equal(t, int64(kinds), counter.n.Load()-before, "statements for %d rows of each kind", n)
	}
	// Fewer updated executions and activities than SetBasedUpdateRows get
	// an UPDATE each.
	n := store.SetBasedUpdateRows - 1
	before := counter.n.Load()
	write(t, db, writes(n))
	require.Equal(t, int64(kinds+2*(n-1)), counter.n.Load()-before, "statements for %d rows of each kind", n)
	before = counter.n.Load()
	write(t, db, &store.Writes{AppliedSeq: 100})
	require.Equal(t, int64(1), counter.n.Load()-before, "an empty batch only records its offset")
}
