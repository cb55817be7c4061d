package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/registry"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/webhook"
	"github.com/harvest-engine/harvest/internal/wire"
)

// newQueueEdge is an edge whose configuration puts approve_order on task
// queue "mine" and declares it, declares plain (on the default queue),
// and routes the webhook source shop's order.created events to hooked,
// configured on task queue "hooks". No worker runs unless a test
// registers one.
func newQueueEdge(t *testing.T) *edge {
	t.Helper()
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 2, MemoryStorage: true})
	require.NoError(t, err)
	s, err := New(Config{Topology: top, NC: nc, OutcomeWait: 50 * time.Millisecond, ArcFlowSecrets: []string{testArcFlowSecret},
		DeclaredWorkflows: []string{"approve_order", "plain"},
		TaskQueues:        map[string]string{"approve_order": "mine", "hooked": "hooks"},
		Webhooks: []webhook.Endpoint{{
			Source: webhook.Source{Name: "shop", Kind: webhook.KindHMAC, Secrets: []string{testHookSecret}, Header: "X-Signature", Prefix: "sha256="},
			Rules:  []webhook.Rule{{Event: "order.created", Workflow: "hooked"}},
		}}})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	return &edge{t: t, s: s, top: top}
}

// serve registers a live worker serving the workflow name on taskQueue,
// as a worker's registrar does.
func (e *edge) serve(name, taskQueue string) {
	e.t.Helper()
	value, err := json.Marshal(registry.Entry{Worker: "worker-" + taskQueue, ExpiresAt: time.Now().Add(time.Hour)})
	require.NoError(e.t, err)
	_, err = e.top.Workers.Put(natstest.Context(e.t), registry.Key(registry.KindWorkflow, name, taskQueue, "worker-"+taskQueue), value)
	require.NoError(e.t, err)
}

// commands decodes the commands the command stream holds, oldest first.
func (e *edge) commands() []wire.Command {
	e.t.Helper()
	ctx := natstest.Context(e.t)
	st, err := e.top.JS.Stream(ctx, broker.CommandStream)
	require.NoError(e.t, err)
	info, err := st.Info(ctx)
	require.NoError(e.t, err)
	var out []wire.Command
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		require.NoError(e.t, err)
		var c wire.Command
		require.NoError(e.t, json.Unmarshal(m.Data, &c))
		out = append(out, c)
	}
	return out
}

// lastQueue sends a request that must be accepted and returns the task
// queue of the start it published.
func (e *edge) lastQueue(method, target, body string) string {
	e.t.Helper()
	before := e.published()
	status, a := e.do(method, target, nil, body)
	require.Less(e.t, status, 300, "%s %s: %+v", target, body, a)
	require.Equal(e.t, before+1, e.published(), "%s %s published one command", target, body)
	cmds := e.commands()
	return cmds[len(cmds)-1].Start.TaskQueue
}

// TestATaskQueueThatIsNoNameIsRefused: a start's or signal-with-start's
// task_queue that is not 1 to 128 bytes of letters, digits, '_' and '-'
// is 400 invalid_task_queue, naming the value and the rule, and nothing
// is published.
func TestATaskQueueThatIsNoNameIsRefused(t *testing.T) {
	t.Parallel()
	e := newQueueEdge(t)
	const (
		start = "/api/harvest/workflows/plain/start"
		sws   = "/api/harvest/workflows/plain/signal-with-start"
	)
	for _, queue := range []string{"", "my queue", "a.b", "queue>", "é", strings.Repeat("q", 129)} {
		quoted, err := json.Marshal(queue)
		require.NoError(t, err)
		for _, tc := range []struct{ target, body string }{
			{start, `{"input": {}, "task_queue": ` + string(quoted) + `}`},
			{sws, `{"workflow_id": "o-1", "signal_name": "item", "task_queue": ` + string(quoted) + `}`},
		} {
			status, a := e.do("POST", tc.target, nil, tc.body)
			require.Equal(t, http.StatusBadRequest, status, "%s: %+v", tc.body, a)
			require.Equal(t, "invalid_task_queue", a.Error, a.Message)
			require.Equal(t, "task_queue", a.Field)
			require.Contains(t, a.Message, `task_queue "`+shownName(queue)+`"`)
			require.Contains(t, a.Message, "1 to 128 bytes of letters, digits, '_' and '-'")
		}
	}
	// One PostgreSQL could not store is refused under the same code.
	status, a := e.do("POST", start, nil, `{"task_queue": "q\u0000"}`)
	require.Equal(t, http.StatusBadRequest, status, "%+v", a)
	require.Equal(t, "invalid_task_queue", a.Error, a.Message)
	require.Equal(t, "task_queue", a.Field)
	// Before the workflow is looked up: a workflow nobody serves is
	// refused for its task_queue first.
	status, a = e.do("POST", "/api/harvest/workflows/nosuch/start", nil, `{"task_queue": "a b"}`)
	require.Equal(t, http.StatusBadRequest, status, "%+v", a)
	require.Equal(t, "invalid_task_queue", a.Error, a.Message)
	require.Zero(t, e.published(), "a refused start publishes nothing")
}

// TestAStartsTaskQueueIsTheBodysElseTheConfiguredOneElseDefault: every
// start ingest makes goes to the request's task_queue, else its
// workflow's configured one, else "default": the API's, signal-with-start,
// an ArcFlow run and a webhook rule's.
func TestAStartsTaskQueueIsTheBodysElseTheConfiguredOneElseDefault(t *testing.T) {
	t.Parallel()
	e := newQueueEdge(t)
	e.serve("approve_order", "urgent")
	e.serve("plain", "urgent")

	for _, tc := range []struct{ name, method, target, body, queue string }{
		{"configured", "POST", "/api/harvest/workflows/approve_order/start", `{"input": {}}`, "mine"},
		{"configured, named", "POST", "/api/harvest/workflows/approve_order/start", `{"task_queue": "mine"}`, "mine"},
		{"the body's over the configured", "POST", "/api/harvest/workflows/approve_order/start", `{"task_queue": "urgent"}`, "urgent"},
		{"default", "POST", "/api/harvest/workflows/plain/start", `{"input": {}}`, wire.DefaultTaskQueue},
		{"default, named", "POST", "/api/harvest/workflows/plain/start", `{"task_queue": "default"}`, wire.DefaultTaskQueue},
		{"the body's over the default", "POST", "/api/harvest/workflows/plain/start", `{"task_queue": "urgent"}`, "urgent"},
		{"signal-with-start, configured", "POST", "/api/harvest/workflows/approve_order/signal-with-start",
			`{"workflow_id": "o-1", "signal_name": "approve"}`, "mine"},
		{"signal-with-start, the body's", "POST", "/api/harvest/workflows/approve_order/signal-with-start",
			`{"workflow_id": "o-2", "signal_name": "approve", "task_queue": "urgent"}`, "urgent"},
		{"signal-with-start, default", "POST", "/api/harvest/workflows/plain/signal-with-start",
			`{"workflow_id": "o-3", "signal_name": "approve"}`, wire.DefaultTaskQueue},
		{"ArcFlow run, configured", "POST", "/v1/runs", `{"workflow": "approve_order"}`, "mine"},
		{"ArcFlow run, default", "POST", "/v1/runs", `{"workflow": "plain"}`, wire.DefaultTaskQueue},
		{"webhook rule, configured", "POST", "/hooks/shop", `{"id": "evt-1", "type": "order.created"}`, "hooks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.queue, e.lastQueue(tc.method, tc.target, tc.body))
		})
	}
}

// TestAStartOnAQueueNoWorkerServesNamesTheQueue: the served check looks
// at the queue the start will use. A declared workflow is accepted on
// its configured queue only; on any other queue, and for a workflow not
// declared, a start is 404 unknown_workflow whose message names the
// workflow and the queue, and nothing is published. A worker serving the
// workflow on the queue makes it served there, and there only.
func TestAStartOnAQueueNoWorkerServesNamesTheQueue(t *testing.T) {
	t.Parallel()
	e := newQueueEdge(t)
	for _, tc := range []struct{ target, body, message string }{
		{"/api/harvest/workflows/approve_order/start", `{"task_queue": "default"}`,
			`no worker serves workflow "approve_order" on task queue "default", and the configuration declares it on task queue "mine"; ` +
				`check the task queue, start a worker that registers it on "default", or start it on "mine"`},
		{"/api/harvest/workflows/plain/start", `{"task_queue": "mine"}`,
			`no worker serves workflow "plain" on task queue "mine", and the configuration declares it on task queue "default"`},
		{"/api/harvest/workflows/nosuch/start", `{"task_queue": "mine"}`,
			`no worker serves workflow "nosuch" on task queue "mine" and the configuration does not declare it; check the name and the task queue, ` +
				`start a worker that registers it on "mine", or declare it (workflows: {nosuch: {task_queue: mine}}) to accept its starts while no worker runs`},
		{"/api/harvest/workflows/nosuch/start", `{}`,
			`no worker serves workflow "nosuch" on task queue "default" and the configuration does not declare it; check the name, ` +
				`start a worker that registers it, or declare it (workflows: {nosuch: {}}) to accept its starts while no worker runs`},
		{"/api/harvest/workflows/approve_order/signal-with-start", `{"workflow_id": "o-1", "signal_name": "approve", "task_queue": "other"}`,
			`no worker serves workflow "approve_order" on task queue "other"`},
		{"/api/harvest/workflows/nosuch/signal-with-start", `{"workflow_id": "o-1", "signal_name": "approve", "task_queue": "mine"}`,
			`no worker serves workflow "nosuch" on task queue "mine" and the configuration does not declare it`},
		{"/v1/runs", `{"workflow": "nosuch"}`, `no worker serves workflow "nosuch" on task queue "default"`},
	} {
		status, a := e.do("POST", tc.target, nil, tc.body)
		require.Equal(t, http.StatusNotFound, status, "%s %s: %+v", tc.target, tc.body, a)
		require.Equal(t, "unknown_workflow", a.Error, a.Message)
		require.Equal(t, "name", a.Field)
		require.Contains(t, a.Message, tc.message)
	}
	require.Zero(t, e.published(), "a refused start publishes nothing")

	// A worker serves nosuch on "mine": a start there is accepted, one on
	// the default queue is still refused.
	e.serve("nosuch", "mine")
	require.Equal(t, "mine", e.lastQueue("POST", "/api/harvest/workflows/nosuch/start", `{"task_queue": "mine"}`))
	status, a := e.do("POST", "/api/harvest/workflows/nosuch/start", nil, `{}`)
	require.Equal(t, http.StatusNotFound, status, "%+v", a)
	require.Contains(t, a.Message, `on task queue "default"`)
}

// TestTheConfiguredTaskQueuesAreChecked: a configured task queue that is
// no task queue name is refused when the server is made, naming the
// workflow.
func TestTheConfiguredTaskQueuesAreChecked(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	top, err := broker.Declare(natstest.Context(t), js, broker.Config{Shards: 2, MemoryStorage: true})
	require.NoError(t, err)
	_, err = New(Config{Topology: top, NC: nc, TaskQueues: map[string]string{"approve_order": "my queue"}})
	require.ErrorContains(t, err, `ingest config: TaskQueues["approve_order"]: invalid name "my queue"`)
}
