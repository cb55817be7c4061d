package ingest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/registry"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// get sends GET target to h with token (none when empty) and decodes a
// 200 answer into out; it returns the status and the raw body.
func get(t *testing.T, h http.Handler, target, token string, out any) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://localhost"+target, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code == http.StatusOK && out != nil {
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), out), rec.Body.String())
	}
	return rec.Code, rec.Body.Bytes()
}

// register starts a worker's registrar on top's bucket, stopped at
// cleanup.
func register(t *testing.T, top *broker.Topology, cfg registry.RegistrarConfig) {
	t.Helper()
	cfg.KV = top.Workers
	r := registry.NewRegistrar(cfg)
	r.Start(natstest.Context(t))
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
}

// publishTasks puts a task on each subject, as a scheduler would.
func publishTasks(t *testing.T, top *broker.Topology, subjects ...string) {
	t.Helper()
	for _, s := range subjects {
		_, err := top.JS.Publish(natstest.Context(t), s, []byte("{}"))
		require.NoError(t, err)
	}
}

// TestWorkersAndTaskQueuesAreVisible: GET /api/harvest/workers lists the
// live workers with who they are and their load (a worker of an older
// version with what its keys tell); GET /api/harvest/task-queues/{name}
// gives each name of the queue its backlog and workers, a name with a
// backlog and no worker among them, and the unrouted backlog; a name
// that is no task queue's is refused.
func TestWorkersAndTaskQueuesAreVisible(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	h := e.s.Handler()

	var list api.ListWorkersResponse
	status, raw := get(t, h, "/api/harvest/workers", "", &list)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"workers": []}`, string(raw))

	before := time.Now().UTC()
	register(t, e.top, registry.RegistrarConfig{Worker: "w1", TaskQueue: "billing", BuildID: "v1.4.0~a1b2c3d4",
		Workflows: []string{"charge"}, Activities: []string{"charge_card"},
		Load: func() registry.Load {
			return registry.Load{WorkflowSlots: 4, WorkflowSlotsUsed: 1, ActivitySlots: 16, ActivitySlotsUsed: 3}
		}})
	register(t, e.top, registry.RegistrarConfig{Worker: "w2", TaskQueue: "default", Workflows: []string{"w"}})
	// A worker of an older version: its name key, and no record.
	old, err := json.Marshal(registry.Entry{Worker: "w0", Host: "old-host", ExpiresAt: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	_, err = e.top.Workers.Put(natstest.Context(t), registry.Key(registry.KindWorkflow, "charge", "billing", "w0"), old)
	require.NoError(t, err)

	status, raw = get(t, h, "/api/harvest/workers", "", &list)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, list.Workers, 3, string(raw))
	host, _ := os.Hostname()
	byID := map[string]api.Worker{}
	for _, w := range list.Workers {
		byID[w.ID] = w
	}
	w1 := byID["w1"]
	require.Equal(t, host, w1.Host)
	require.Equal(t, os.Getpid(), w1.PID)
	require.NotEmpty(t, w1.Build)
	require.Equal(t, "v1.4.0~a1b2c3d4", w1.BuildID)
	require.WithinRange(t, w1.StartedAt, before.Add(-time.Second), time.Now())
	require.Equal(t, "billing", w1.TaskQueue)
	require.Equal(t, []string{"charge"}, w1.Workflows)
	require.Equal(t, []string{"charge_card"}, w1.Activities)
	require.Equal(t, &api.WorkerSlots{Workflow: api.SlotUsage{Used: 1, Size: 4}, Activity: api.SlotUsage{Used: 3, Size: 16}}, w1.Slots)
	require.WithinDuration(t, time.Now(), w1.LastHeartbeatAt, 5*time.Second)
	require.Nil(t, byID["w2"].Slots, "a worker that reports no load")
	require.Equal(t, []string{}, byID["w2"].Activities)
	w0 := byID["w0"]
	require.Equal(t, api.Worker{ID: "w0", Host: "old-host", TaskQueue: "billing", Workflows: []string{"charge"}, Activities: []string{},
		LastHeartbeatAt: w0.LastHeartbeatAt}, w0, "an older worker: what its keys tell")
	require.False(t, w0.LastHeartbeatAt.IsZero())
	// By task queue, host and id.
	var order []string
	for _, w := range list.Workers {
		order = append(order, w.ID)
	}
	if host < "old-host" {
		require.Equal(t, []string{"w1", "w0", "w2"}, order)
	} else {
		require.Equal(t, []string{"w0", "w1", "w2"}, order)
	}
	// The members, as documented.
	var members struct {
		Workers []map[string]json.RawMessage `json:"workers"`
	}
	require.NoError(t, json.Unmarshal(raw, &members))
	for _, w := range members.Workers {
		if string(w["id"]) == `"w1"` {
			for _, m := range []string{"id", "host", "pid", "build", "build_id", "started_at", "task_queue", "workflows", "activities", "slots", "last_heartbeat_at"} {
				require.Contains(t, w, m)
			}
			require.JSONEq(t, `{"workflow": {"used": 1, "size": 4}, "activity": {"used": 3, "size": 16}}`, string(w["slots"]))
		}
	}

	// Tasks: one of charge, two of refund (no worker serves it), one
	// unrouted activity task, and one of another queue.
	publishTasks(t, e.top,
		broker.NameTaskSubject("billing", wire.TaskWorkflow, "charge"),
		broker.NameTaskSubject("billing", wire.TaskWorkflow, "refund"),
		broker.NameTaskSubject("billing", wire.TaskWorkflow, "refund"),
		broker.TaskSubject("billing", wire.TaskActivity),
		broker.NameTaskSubject("default", wire.TaskWorkflow, "charge"),
	)
	var q api.TaskQueueResponse
	status, raw = get(t, h, "/api/harvest/task-queues/billing", "", &q)
	require.Equal(t, http.StatusOK, status, string(raw))
	require.Equal(t, api.TaskQueueResponse{
		TaskQueue: "billing",
		Workflows: []api.NameBacklog{
			{Name: "charge", Backlog: 1, Workers: []string{"w0", "w1"}},
			{Name: "refund", Backlog: 2, Workers: []string{}},
		},
		Activities:      []api.NameBacklog{{Name: "charge_card", Backlog: 0, Workers: []string{"w1"}}},
		UnroutedBacklog: api.UnroutedBacklog{Activity: 1},
	}, q)
	require.Contains(t, string(raw), `{"name":"refund","backlog":2,"workers":[]}`, "no worker is an empty list")

	status, raw = get(t, h, "/api/harvest/task-queues/nothing_here", "", &q)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"task_queue": "nothing_here", "workflows": [], "activities": [], "unrouted_backlog": {"workflow": 0, "activity": 0}}`, string(raw))

	for _, bad := range []string{"bad.queue", "a%20b", "%C3%A9t%C3%A9"} {
		code, a := e.do(http.MethodGet, "/api/harvest/task-queues/"+bad, nil, "")
		require.Equal(t, http.StatusBadRequest, code, bad)
		require.Equal(t, api.CodeInvalidTaskQueue, a.Error, bad)
		require.Equal(t, "name", a.Field)
	}
	code, a := e.do(http.MethodGet, "/api/harvest/task-queues/billing?kind=workflow", nil, "")
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, api.CodeUnknownParameter, a.Error)
	code, a = e.do(http.MethodGet, "/api/harvest/workers?task_queue=billing", nil, "")
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, api.CodeUnknownParameter, a.Error)
}

// TestWorkersAndTaskQueuesNeedTheReadScope: without a token both routes
// are 401; a token limited to some workflows sees every worker with only
// those workflows, and a task queue's other workflows not at all.
func TestWorkersAndTaskQueuesNeedTheReadScope(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 1, MemoryStorage: true})
	require.NoError(t, err)
	a, err := auth.New([]auth.Token{
		{Name: "reader", SHA256: auth.Hash("t-reader"), Scopes: []auth.Scope{auth.ScopeRead}},
		{Name: "billing", SHA256: auth.Hash("t-billing"), Scopes: []auth.Scope{auth.ScopeRead}, Workflows: []string{"charge"}},
		{Name: "starter", SHA256: auth.Hash("t-starter"), Scopes: []auth.Scope{auth.ScopeStart}},
	})
	require.NoError(t, err)
	s, err := New(Config{Topology: top, NC: nc, Auth: a})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	h := s.Handler()
	register(t, top, registry.RegistrarConfig{Worker: "w1", TaskQueue: "default",
		Workflows: []string{"charge", "payroll"}, Activities: []string{"charge_card"}})
	publishTasks(t, top, broker.NameTaskSubject("default", wire.TaskWorkflow, "payroll"))

	for _, target := range []string{"/api/harvest/workers", "/api/harvest/task-queues/default"} {
		status, _ := get(t, h, target, "", nil)
		require.Equal(t, http.StatusUnauthorized, status, target)
		status, _ = get(t, h, target, "t-starter", nil)
		require.Equal(t, http.StatusForbidden, status, target)
	}

	var list api.ListWorkersResponse
	status, _ := get(t, h, "/api/harvest/workers", "t-reader", &list)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, list.Workers, 1)
	require.Equal(t, []string{"charge", "payroll"}, list.Workers[0].Workflows)
	status, _ = get(t, h, "/api/harvest/workers", "t-billing", &list)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, list.Workers, 1)
	require.Equal(t, []string{"charge"}, list.Workers[0].Workflows)
	require.Equal(t, []string{"charge_card"}, list.Workers[0].Activities)

	var q api.TaskQueueResponse
	status, _ = get(t, h, "/api/harvest/task-queues/default", "t-reader", &q)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, q.Workflows, 2)
	status, _ = get(t, h, "/api/harvest/task-queues/default", "t-billing", &q)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, []api.NameBacklog{{Name: "charge", Workers: []string{"w1"}}}, q.Workflows)
	require.Equal(t, []api.NameBacklog{{Name: "charge_card", Workers: []string{"w1"}}}, q.Activities)
}
