package ingest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// replayCheckPayload is the max payload of the NATS server of the replay
// check's tests: small, so that a history can be larger.
const replayCheckPayload = 64 << 10

// TestIngestAnswersTheReplayCheck: ingest answers a starting worker's
// replay check on core NATS: the newest running executions of a workflow
// on a task queue, up to the limit (not those of another queue, status or
// workflow); an execution's history with its attributes byte for byte (a
// number beyond 2^53 intact); a history larger than the NATS server
// carries as too large, never crashing; an unknown execution and a bad
// request as errors. Two ingests answer, in one queue group.
func TestIngestAnswersTheReplayCheck(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{Configure: func(o *server.Options) { o.MaxPayload = replayCheckPayload }})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 1, MemoryStorage: true})
	require.NoError(t, err)
	db := pgtest.NewPool(t)
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	const (
		oldest = "0199a3e4-7c4b-7d1a-9c2e-000000000001"
		big    = "0199a3e4-7c4b-7d1a-9c2e-000000000002"
		newest = "0199a3e4-7c4b-7d1a-9c2e-000000000003"
	)
	execution(t, db, oldest, "charge", "default", "Running", at, `{"input":{"order":12345678901234567890}}`)
	execution(t, db, big, "charge", "default", "Running", at.Add(time.Minute), `{"input":"`+strings.Repeat("x", replayCheckPayload)+`"}`)
	execution(t, db, newest, "charge", "default", "Running", at.Add(2*time.Minute), `{"input":1}`)
	execution(t, db, "0199a3e4-7c4b-7d1a-9c2e-000000000004", "charge", "billing", "Running", at.Add(3*time.Minute), `{}`)
	execution(t, db, "0199a3e4-7c4b-7d1a-9c2e-000000000005", "charge", "default", "Completed", at.Add(4*time.Minute), `{}`)
	execution(t, db, "0199a3e4-7c4b-7d1a-9c2e-000000000006", "refund", "default", "Running", at.Add(5*time.Minute), `{}`)

	for range 2 {
		s, err := New(Config{Topology: top, NC: nc, DB: db})
		require.NoError(t, err)
		require.NoError(t, s.Start(ctx))
		t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	}

	var sample wire.ReplaySampleReply
	ask(t, nc, broker.ReplaySampleSubject, wire.ReplaySampleRequest{Workflow: "charge", TaskQueue: "default", Limit: 10}, &sample)
	require.Equal(t, wire.ReplaySampleReply{ExecutionIDs: []string{newest, big, oldest}}, sample)
	sample = wire.ReplaySampleReply{}
	ask(t, nc, broker.ReplaySampleSubject, wire.ReplaySampleRequest{Workflow: "charge", TaskQueue: "default", Limit: 1}, &sample)
	require.Equal(t, []string{newest}, sample.ExecutionIDs)
	for _, bad := range []wire.ReplaySampleRequest{
		{Workflow: "charge", TaskQueue: "default"},
		{Workflow: "charge", TaskQueue: "default", Limit: wire.MaxReplaySample + 1},
		{Workflow: "a.b", TaskQueue: "default", Limit: 1},
	} {
		sample = wire.ReplaySampleReply{}
		ask(t, nc, broker.ReplaySampleSubject, bad, &sample)
		require.NotEmpty(t, sample.Error, "%+v", bad)
		require.Empty(t, sample.ExecutionIDs)
	}

	var h wire.ReplayHistoryReply
	ask(t, nc, broker.ReplayHistorySubject, wire.ReplayHistoryRequest{ExecutionID: oldest}, &h)
	require.Empty(t, h.Error)
	require.False(t, h.TooLarge)
	require.Equal(t, oldest, h.History.ExecutionID)
	require.Equal(t, "charge", h.History.WorkflowName)
	require.Equal(t, "default", h.History.TaskQueue)
	require.Equal(t, "Running", h.History.Status)
	require.Len(t, h.History.Events, 1)
	require.Equal(t, wire.EventWorkflowStarted, h.History.Events[0].Type)
	require.JSONEq(t, `{"input":{"order":12345678901234567890}}`, string(h.History.Events[0].Attrs))
	require.Contains(t, string(h.History.Events[0].Attrs), "12345678901234567890", "not rounded through a float")

	h = wire.ReplayHistoryReply{}
	ask(t, nc, broker.ReplayHistorySubject, wire.ReplayHistoryRequest{ExecutionID: big}, &h)
	require.True(t, h.TooLarge)
	require.Nil(t, h.History)
	require.Contains(t, h.Error, "more than the NATS server's max payload of 65536")

	for _, id := range []string{"0199a3e4-7c4b-7d1a-9c2e-0000000000ff", "not-an-id"} {
		h = wire.ReplayHistoryReply{}
		ask(t, nc, broker.ReplayHistorySubject, wire.ReplayHistoryRequest{ExecutionID: id}, &h)
		require.NotEmpty(t, h.Error, id)
		require.False(t, h.TooLarge)
		require.Nil(t, h.History)
	}
}

// TestIngestWithoutADatabaseDoesNotAnswerTheReplayCheck: an ingest
// without PostgreSQL cannot read histories, so it does not subscribe: a
// worker that no ingest with one answers skips its check at once.
func TestIngestWithoutADatabaseDoesNotAnswerTheReplayCheck(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 1, MemoryStorage: true})
	require.NoError(t, err)
	s, err := New(Config{Topology: top, NC: nc})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	_, err = nc.Request(broker.ReplaySampleSubject, []byte(`{"workflow":"charge","task_queue":"default","limit":1}`), 5*time.Second)
	require.ErrorIs(t, err, nats.ErrNoResponders)
}

// execution inserts a running execution of workflow on taskQueue with
// status, created at, and one WorkflowStarted event of attrs.
func execution(t *testing.T, db *pgxpool.Pool, id, workflow, taskQueue, status string, at time.Time, attrs string) {
	t.Helper()
	ctx := context.Background()
	_, err := db.Exec(ctx, `INSERT INTO executions (execution_id, shard, workflow_name, workflow_id, task_queue, status, created_at, updated_at)
		VALUES ($1::uuid, 0, $2, $1::text, $3, $4, $5, $5)`, id, workflow, taskQueue, status, at)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO history_events (execution_id, seq, type, at, attrs) VALUES ($1, 1, $2, $3, $4)`, id, wire.EventWorkflowStarted, at, attrs)
	require.NoError(t, err)
}

// ask sends req on subject and decodes the answer into reply.
func ask(t *testing.T, nc *nats.Conn, subject string, req, reply any) {
	t.Helper()
	data, err := json.Marshal(req)
	require.NoError(t, err)
	m, err := nc.Request(subject, data, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(m.Data, reply))
}
