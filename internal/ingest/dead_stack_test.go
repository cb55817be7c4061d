package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// poisonStart is a keyed start whose workflow_id PostgreSQL cannot store,
// published straight to the command stream, as a client bypassing
// ingest's checks (or an older ingest) could.
func poisonStart(t *testing.T, s *devstack.Stack, key string) wire.Command {
	t.Helper()
	cmd := wire.Command{CommandID: dedup.StartCommandID("charge", key), Kind: wire.KindStart, Start: &wire.StartCommand{
		WorkflowName: "charge", WorkflowID: "order\x00" + key, IdempotencyKey: key, TaskQueue: wire.DefaultTaskQueue,
		Input: json.RawMessage(`{"amount_cents": 100, "customer_id": "cus_poison"}`),
	}}
	shard := placement.StartShard(s.Topology.Shards(), "charge", cmd.Start.WorkflowID, key)
	_, err := s.Topology.PublishCommand(natstest.Context(t), shard, &cmd)
	require.NoError(t, err)
	return cmd
}

// TestDeadCommandsAreAnsweredAndListed: a command the scheduler cannot
// apply is answered with an error under its command id, listed with its
// reason and its message, counted, and leaves the stack ready; an
// ordinary start right after it completes.
func TestDeadCommandsAreAnsweredAndListed(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	cmd := poisonStart(t, s, "poison-1")

	var got stacktest.Answer
	probe.Until(t, 30*time.Second, "the poison command's outcome", func() bool {
		got = stacktest.Call(t, "GET", s.URL()+"/api/harvest/commands/"+cmd.CommandID, nil, "")
		return got.Status == 200 && got.Body["status"] != "accepted"
	})
	require.Equal(t, "rejected", got.Body["status"])
	require.EqualValues(t, 422, got.Body["http_status"])
	outcome := got.Body["outcome"].(map[string]any)
	require.Equal(t, "command_rejected", outcome["error"])
	require.Contains(t, outcome["message"], "invalid byte sequence")
	c, err := client.New(client.Config{BaseURL: s.URL()})
	require.NoError(t, err)
	status, err := c.Command(natstest.Context(t), cmd.CommandID)
	require.NoError(t, err)
	require.True(t, status.Applied && status.Rejected, "final, and rejected")
	require.Equal(t, 422, status.HTTPStatus)
	deadList, err := c.DeadCommands(natstest.Context(t), client.DeadCommandsOptions{})
	require.NoError(t, err)
	require.Len(t, deadList, 1)
	full, err := c.DeadCommand(natstest.Context(t), deadList[0].ID)
	require.NoError(t, err)
	require.NotEmpty(t, full.Payload)

	list := stacktest.Call(t, "GET", s.URL()+"/api/harvest/commands/dead", nil, "")
	require.Equal(t, 200, list.Status, list.Body)
	dead := list.Body["dead_commands"].([]any)
	require.Len(t, dead, 1)
	d := dead[0].(map[string]any)
	require.Equal(t, cmd.CommandID, d["command_id"])
	require.Equal(t, "unappliable", d["error"])
	require.Equal(t, "start", d["kind"])
	require.Nil(t, d["payload"], "the list leaves payloads out")
	one := stacktest.Call(t, "GET", fmt.Sprintf("%s/api/harvest/commands/dead/%v", s.URL(), d["id"]), nil, "")
	require.Equal(t, 200, one.Status, one.Body)
	payload := one.Body["payload"].(map[string]any)
	require.Equal(t, "order\x00poison-1", payload["start"].(map[string]any)["workflow_id"], "the message as it came")
	require.Equal(t, 404, stacktest.Call(t, "GET", s.URL()+"/api/harvest/commands/dead/999999", nil, "").Status)
	require.Equal(t, 400, stacktest.Call(t, "GET", s.URL()+"/api/harvest/commands/dead?limit=0", nil, "").Status)

	ready := stacktest.Call(t, "GET", s.URL()+"/readyz", nil, "")
	require.Equal(t, 200, ready.Status, ready.Body)
	require.Equal(t, "ok", ready.Body["database"])
	require.Contains(t, metricsText(t, s), `harvest_scheduler_dead_commands_total{error="unappliable"} 1`)

	st := stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/charge/start", map[string]string{"Idempotency-Key": "after-poison"}, `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 201, st.Status, st.Body)
	stacktest.WaitCompleted(t, s, st.Body["execution_id"].(string))
	require.Zero(t, stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE idempotency_key = 'poison-1'`))
}

// TestReadyzReportsAShardThatKeepsFailing: a shard whose applies fail for
// a reason that is not the command's (here a table gone missing, as a
// deploy gone wrong would leave it) is retried, never dead-lettered, and
// reported by /readyz (200 degraded: ingest still serves) and the
// metrics until it applies again, its error recorded by the scheduler.
func TestReadyzReportsAShardThatKeepsFailing(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{ShardFailingAfter: 200 * time.Millisecond}})
	ctx := natstest.Context(t)
	_, err := s.DB.Exec(ctx, `ALTER TABLE history_events RENAME TO history_events_away`)
	require.NoError(t, err)
	cmd := wire.Command{CommandID: dedup.StartCommandID("charge", "while-broken"), Kind: wire.KindStart, Start: &wire.StartCommand{
		WorkflowName: "charge", WorkflowID: "order-while-broken", IdempotencyKey: "while-broken", TaskQueue: wire.DefaultTaskQueue,
		Input: json.RawMessage(`{"amount_cents": 100, "customer_id": "cus_1"}`)}}
	shard := placement.StartShard(s.Topology.Shards(), "charge", cmd.Start.WorkflowID, "while-broken")
	_, err = s.Topology.PublishCommand(ctx, shard, &cmd)
	require.NoError(t, err)

	var ready stacktest.Answer
	probe.Until(t, 30*time.Second, "readyz to report the failing shard", func() bool {
		ready = stacktest.Call(t, "GET", s.URL()+"/readyz", nil, "")
		return ready.Body["failing_shards"] != nil
	})
	require.Equal(t, 200, ready.Status, "ingest serves: %v", ready.Body)
	require.Equal(t, "degraded", ready.Body["status"])
	require.Nil(t, ready.Body["error"])
	failing := ready.Body["failing_shards"].([]any)
	require.Len(t, failing, 1)
	require.Equal(t, float64(shard), failing[0].(map[string]any)["shard"])
	require.Equal(t, "failing", failing[0].(map[string]any)["cause"])
	require.NotContains(t, failing[0], "last_error", "ingest's public answer quotes no PostgreSQL error")
	var lastError string
	require.NoError(t, s.DB.QueryRow(ctx, `SELECT last_error FROM shard_offsets WHERE failing_since IS NOT NULL`).Scan(&lastError))
	require.Contains(t, lastError, "history_events", "the scheduler records it")
	metrics := metricsText(t, s)
	require.Contains(t, metrics, "harvest_scheduler_failing_shards 1")
	require.Contains(t, metrics, `harvest_ingest_failing_shards{cause="failing"} 1`)
	require.Contains(t, metrics, `harvest_ingest_failing_shards{cause="unowned"} 0`)

	_, err = s.DB.Exec(ctx, `ALTER TABLE history_events_away RENAME TO history_events`)
	require.NoError(t, err)
	probe.Until(t, 60*time.Second, "the start to complete", func() bool {
		return stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE idempotency_key = 'while-broken' AND status = 'Completed'`) == 1
	})
	probe.Until(t, 30*time.Second, "readyz to be ready again", func() bool {
		r := stacktest.Call(t, "GET", s.URL()+"/readyz", nil, "")
		return r.Status == 200 && r.Body["status"] == "ready"
	})
	metrics = metricsText(t, s)
	require.Contains(t, metrics, "harvest_scheduler_failing_shards 0")
	require.Contains(t, metrics, `harvest_ingest_failing_shards{cause="failing"} 0`)
	require.Zero(t, stacktest.DBCount(t, s, `SELECT count(*) FROM dead_commands`), "a failure that is not the command's dead-letters nothing")
}

func metricsText(t *testing.T, s *devstack.Stack) string {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), "GET", s.URL()+"/metrics", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return strings.TrimSpace(string(raw))
}

// TestALostCommandIsAcceptedAgain: a keyed start whose message left the
// command stream without being applied (here deleted from the stream, as
// the broker lost commands before the scheduler noticed lost deliveries)
// is not swallowed as a broker duplicate for the rest of the duplicate
// window: a retry with its key is accepted again and starts the
// execution.
func TestALostCommandIsAcceptedAgain(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{OutcomeWait: 5 * time.Second}})
	ctx := natstest.Context(t)
	id := dedup.StartCommandID("charge", "lost-1")
	// Where no scheduler reads it; then gone.
	ack, err := s.Topology.JS.Publish(ctx, "harvest.cmd.4095.start", []byte(`{}`), jetstream.WithMsgID(id))
	require.NoError(t, err)
	require.NoError(t, commandStream(t, s).DeleteMsg(ctx, ack.Sequence))

	r := stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/charge/start", map[string]string{"Idempotency-Key": "lost-1"}, `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 201, r.Status, r.Body)
	stacktest.WaitCompleted(t, s, r.Body["execution_id"].(string))
	require.Contains(t, metricsText(t, s), "harvest_ingest_lost_commands_total 1")
	r = stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/charge/start", map[string]string{"Idempotency-Key": "lost-1"}, `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 200, r.Status, r.Body)
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE idempotency_key = 'lost-1'`))
	require.Contains(t, metricsText(t, s), "harvest_ingest_lost_commands_total 1", "a retry of an applied command is no loss")

	// A keyed signal lost the same way is delivered by its retry.
	started := stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/collect/start", nil, `{"input": {"count": 1}}`)
	require.Equal(t, 201, started.Status, started.Body)
	collector := started.Body["execution_id"].(string)
	sid := dedup.SignalCommandID(collector, "item-1")
	ack, err = s.Topology.JS.Publish(ctx, "harvest.cmd.4095.signal", []byte(`{}`), jetstream.WithMsgID(sid))
	require.NoError(t, err)
	require.NoError(t, commandStream(t, s).DeleteMsg(ctx, ack.Sequence))
	r = stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+collector+"/signals/item", map[string]string{"Idempotency-Key": "item-1"}, `"a"`)
	require.Equal(t, 202, r.Status, r.Body)
	require.Equal(t, true, r.Body["signal_delivered"], r.Body)
	stacktest.WaitCompleted(t, s, collector)
	require.Contains(t, metricsText(t, s), "harvest_ingest_lost_commands_total 2")
}

func commandStream(t *testing.T, s *devstack.Stack) jetstream.Stream {
	t.Helper()
	st, err := s.Topology.JS.Stream(natstest.Context(t), broker.CommandStream)
	require.NoError(t, err)
	return st
}
