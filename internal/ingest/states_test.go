package ingest

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// TestAStateAnnouncementWakesTheReadsOfItsExecution: an announcement
// wakes every read waiting on its execution, once however many come
// before it reads again, and none of another execution's; a read that
// stopped waiting is woken no more.
func TestAStateAnnouncementWakesTheReadsOfItsExecution(t *testing.T) {
	t.Parallel()
	const a, b = "01a2398e-0000-7000-8000-00000000000a", "01a2398e-0000-7000-8000-00000000000b"
	w := changeWakers(broker.StateExecutionID)
	a1, stopA1 := w.wait(a)
	a2, stopA2 := w.wait(a)
	b1, stopB1 := w.wait(b)
	defer stopB1()
	w.deliver(&nats.Msg{Subject: broker.StateSubject(a)})
	w.deliver(&nats.Msg{Subject: broker.StateSubject(a)})
	w.deliver(&nats.Msg{Subject: "harvest.outcome.x"})
	for _, ch := range []<-chan struct{}{a1, a2} {
		require.Len(t, ch, 1)
		<-ch
	}
	require.Empty(t, b1)
	stopA1()
	w.deliver(&nats.Msg{Subject: broker.StateSubject(a)})
	require.Empty(t, a1)
	require.Len(t, a2, 1)
	stopA2()
	w.mu.Lock()
	_, left := w.waiting[a]
	w.mu.Unlock()
	require.False(t, left, "an execution nobody waits on is forgotten")
}

// TestTheStateRouteTakesNoWholeRequestDeadline: a read of one state
// waits for a newer value, so the read routes' deadline bounds each of
// its reads, not the request; every other read route keeps it.
func TestTheStateRouteTakesNoWholeRequestDeadline(t *testing.T) {
	t.Parallel()
	require.False(t, readRoute(stateRoute))
	require.True(t, readRoute("GET /api/harvest/executions/{execution_id}/state"))
	require.True(t, readRoute("GET /api/harvest/executions/{execution_id}/history"))
}

// TestAWaitingStateReadIsWokenByTheAnnouncement: on an HTTP server whose
// read and write timeouts are shorter than a read's wait, the read still
// answers at the end of its wait, with the value there is. A read waiting
// for a newer value, with no periodic read to find it, answers the value
// stored next once the scheduler's announcement comes; a closed
// execution's read does not wait.
func TestAWaitingStateReadIsWokenByTheAnnouncement(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 1, MemoryStorage: true})
	require.NoError(t, err)
	db := pgtest.NewPool(t)
	require.NoError(t, store.EnsureShards(ctx, db, 1))
	s, err := New(Config{Topology: top, NC: nc, DB: db})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	s.stateRecheck = time.Hour
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: s.Handler(), ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	const id = "01a2398e-0000-7000-8000-0000000000c1"
	_, err = db.Exec(ctx, `INSERT INTO executions (execution_id, shard, workflow_name, workflow_id, task_queue, status)
		VALUES ($1, 0, 'tally', 'w-c1', 'default', 'Running')`, id)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO execution_states (execution_id, name, value, seq, updated_at) VALUES ($1, 'progress', '{"n": 1}', 4, now())`, id)
	require.NoError(t, err)
	read := func(query string) (api.State, time.Duration) {
		t.Helper()
		began := time.Now()
		resp, err := http.Get("http://" + ln.Addr().String() + "/api/harvest/executions/" + id + "/state/progress?" + query)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var st api.State
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
		return st, time.Since(began)
	}

	st, took := read("after_seq=4&wait=1s")
	require.Equal(t, 4, st.Seq, "no newer value: the one there is")
	require.GreaterOrEqual(t, took, time.Second, "it waited, past the server's timeouts")

	got := make(chan api.State, 1)
	go func() {
		st, _ := read("after_seq=4&wait=50s")
		got <- st
	}()
	probe.Until(t, 30*time.Second, "the read to wait", func() bool {
		s.states.mu.Lock()
		defer s.states.mu.Unlock()
		return len(s.states.waiting[id]) == 1
	})
	_, err = db.Exec(ctx, `UPDATE execution_states SET value = '{"n": 2}', seq = 6 WHERE execution_id = $1`, id)
	require.NoError(t, err)
	require.NoError(t, nc.Publish(broker.StateSubject(id), nil))
	st = <-got
	require.Equal(t, 6, st.Seq)
	require.JSONEq(t, `{"n": 2}`, string(st.Value))

	_, err = db.Exec(ctx, `UPDATE executions SET status = 'Completed' WHERE execution_id = $1`, id)
	require.NoError(t, err)
	st, took = read("after_seq=6&wait=50s")
	require.Equal(t, "Completed", st.Status)
	require.Less(t, took, 25*time.Second, "closed: no newer value can come")
}
