package ingest_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestAQueryStateIsReadWhileItsWorkflowRunsAndAfter: tally sets its state
// "progress" at its start and at each signal. The route answers its value
// with the seq of the task that set it; an unknown state is 404
// state_not_found, an unknown execution 404 execution_not_found, and bad
// parameters 400 with the field. A read waiting for a newer value (its
// request in flight, the scheduler's announcement subscribed to) gets the
// one a signal leads to, long before its wait ends; one whose wait ends
// first answers the value it has. Once the execution has closed, a
// waiting read answers at once. The list route and the console show the
// states.
func TestAQueryStateIsReadWhileItsWorkflowRunsAndAfter(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{Metrics: reg}})
	c, ctx := stacktest.Client(t, s)
	started, err := c.Start(ctx, examples.WorkflowTally, examples.TallyInput{Every: 100, Until: 2}, client.StartOptions{})
	require.NoError(t, err)
	id := started.ExecutionID
	var st *client.State
	probe.Until(t, 30*time.Second, "tally's first task to set its state", func() bool {
		st, err = c.State(ctx, id, examples.TallyProgress, client.StateOptions{})
		return err == nil
	})
	require.Equal(t, id, st.ExecutionID)
	require.Equal(t, examples.TallyProgress, st.Name)
	require.JSONEq(t, `{"every": 100, "until": 2, "total": 0, "count": 0, "runs": 1}`, string(st.Value))
	require.Equal(t, client.StatusRunning, st.Status)
	events, err := c.History(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "WorkflowTaskCompleted", events[st.Seq-1].Type, "seq is the task's WorkflowTaskCompleted")
	require.False(t, st.UpdatedAt.IsZero())

	base := s.URL() + "/api/harvest/executions/" + id + "/state/"
	for _, c := range []struct {
		path        string
		status      int
		code, field string
	}{
		{base + "nope", http.StatusNotFound, "state_not_found", ""},
		{s.URL() + "/api/harvest/executions/01a2398e-0000-7000-8000-000000000000/state/progress", http.StatusNotFound, "execution_not_found", ""},
		{s.URL() + "/api/harvest/executions/01a2398e-0000-7000-8000-000000000000/state", http.StatusNotFound, "execution_not_found", ""},
		{s.URL() + "/api/harvest/executions/not-an-id/state/progress", http.StatusBadRequest, "invalid_execution_id", "execution_id"},
		{base + "no.dots", http.StatusBadRequest, "invalid_state_name", "name"},
		{base + "progress?wait=forever", http.StatusBadRequest, "invalid_wait", "wait"},
		{base + "progress?wait=61s", http.StatusBadRequest, "invalid_wait", "wait"},
		{base + "progress?wait=-1s", http.StatusBadRequest, "invalid_wait", "wait"},
		{base + "progress?after_seq=x", http.StatusBadRequest, "invalid_after_seq", "after_seq"},
		{base + "progress?after_seq=-1", http.StatusBadRequest, "invalid_after_seq", "after_seq"},
		{base + "progress?timeout=1s", http.StatusBadRequest, "unknown_parameter", "timeout"},
	} {
		a := stacktest.Call(t, "GET", c.path, nil, "")
		require.Equal(t, c.status, a.Status, c.path)
		require.Equal(t, c.code, a.Body["error"], c.path)
		require.NotEmpty(t, a.Body["message"], c.path)
		if c.field != "" {
			require.Equal(t, c.field, a.Body["field"], c.path)
		}
	}
	_, err = c.State(ctx, id, "nope", client.StateOptions{})
	require.ErrorIs(t, err, client.ErrStateNotFound)

	// A wait that ends first answers the value there is.
	same, err := c.State(ctx, id, examples.TallyProgress, client.StateOptions{AfterSeq: st.Seq, Wait: 300 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, st.Seq, same.Seq)

	// A read waiting for a newer value gets the signal's.
	announced, err := s.NC().SubscribeSync(broker.StateSubject(id))
	require.NoError(t, err)
	t.Cleanup(func() { _ = announced.Unsubscribe() })
	type polled struct {
		st   *client.State
		err  error
		took time.Duration
	}
	done := make(chan polled, 1)
	go func() {
		began := time.Now()
		got, err := c.State(ctx, id, examples.TallyProgress, client.StateOptions{AfterSeq: st.Seq, Wait: 50 * time.Second})
		done <- polled{got, err, time.Since(began)}
	}()
	probe.Until(t, 30*time.Second, "the read to wait", func() bool {
		v, _ := probe.Read(t, reg, "harvest_ingest_http_requests_in_flight")
		return v >= 1
	})
	require.NoError(t, c.SendSignal(ctx, id, examples.AddSignal.Name, 5))
	p := <-done
	require.NoError(t, p.err)
	require.Less(t, p.took, 40*time.Second, "woken by the new value, not the end of its wait")
	require.Greater(t, p.st.Seq, st.Seq)
	require.JSONEq(t, `{"every": 100, "until": 2, "total": 5, "count": 1, "runs": 1}`, string(p.st.Value))
	_, err = announced.NextMsg(30 * time.Second)
	require.NoError(t, err, "the scheduler announces the execution's states changed")

	// Closed: no newer value can come, so a waiting read answers at once.
	require.NoError(t, c.SendSignal(ctx, id, examples.AddSignal.Name, 7))
	stacktest.WaitCompleted(t, s, id)
	final, err := c.State(ctx, id, examples.TallyProgress, client.StateOptions{})
	require.NoError(t, err)
	require.Equal(t, client.StatusCompleted, final.Status)
	require.JSONEq(t, `{"every": 100, "until": 2, "total": 12, "count": 2, "runs": 1}`, string(final.Value))
	began := time.Now()
	again, err := c.State(ctx, id, examples.TallyProgress, client.StateOptions{AfterSeq: final.Seq, Wait: 50 * time.Second})
	require.NoError(t, err)
	require.Equal(t, final.Seq, again.Seq)
	_, err = c.State(ctx, id, "nope", client.StateOptions{Wait: 50 * time.Second})
	require.ErrorIs(t, err, client.ErrStateNotFound)
	require.Less(t, time.Since(began), 40*time.Second, "a closed execution's reads do not wait")

	all, err := c.States(ctx, id)
	require.NoError(t, err)
	require.Equal(t, client.StatusCompleted, all.Status)
	require.Len(t, all.States, 1)
	require.Equal(t, *final, all.States[0])
	page := consolePage(t, s, id)
	require.Contains(t, page, `id="states"`)
	require.Contains(t, page, `&#34;total&#34;:12`)
}

// TestAQueryStateIsReadWithNoWorkerRunning: with every worker stopped,
// an execution's state is read as its last task left it, a wait for a
// newer one ends with it, and an execution whose code never ran has no
// state.
func TestAQueryStateIsReadWithNoWorkerRunning(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	c, ctx := stacktest.Client(t, s)
	started, err := c.Start(ctx, examples.WorkflowTally, examples.TallyInput{Every: 100}, client.StartOptions{})
	require.NoError(t, err)
	id := started.ExecutionID
	// Its first task would run an hour from now: its code never runs.
	later, err := c.Start(ctx, examples.WorkflowTally, examples.TallyInput{Every: 100}, client.StartOptions{Delay: time.Hour})
	require.NoError(t, err)
	require.NoError(t, c.SendSignal(ctx, id, examples.AddSignal.Name, 3))
	var st *client.State
	probe.Until(t, 30*time.Second, "tally to take the signal", func() bool {
		st, err = c.State(ctx, id, examples.TallyProgress, client.StateOptions{})
		return err == nil && st.Seq > 2
	})
	require.NoError(t, s.Worker().Stop(natstest.Context(t)))

	got, err := c.State(ctx, id, examples.TallyProgress, client.StateOptions{})
	require.NoError(t, err)
	require.Equal(t, *st, *got)
	require.JSONEq(t, `{"every": 100, "until": 0, "total": 3, "count": 1, "runs": 1}`, string(got.Value))
	waited, err := c.State(ctx, id, examples.TallyProgress, client.StateOptions{AfterSeq: got.Seq, Wait: 200 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, got.Seq, waited.Seq)

	_, err = c.State(ctx, later.ExecutionID, examples.TallyProgress, client.StateOptions{})
	require.ErrorIs(t, err, client.ErrStateNotFound, "its code has not run")
	all, err := c.States(ctx, later.ExecutionID)
	require.NoError(t, err)
	require.Empty(t, all.States)
}
