package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/binding"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/startpolicy"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/webhook"
)

func policy(t *testing.T, p client.StartPolicy) *startpolicy.Policy {
	t.Helper()
	pol, err := startpolicy.Parse(&p)
	require.NoError(t, err)
	return pol
}

func policyStack(t *testing.T, policies map[string]*startpolicy.Policy) *devstack.Stack {
	t.Helper()
	return stacktest.Start(t, devstack.Config{Ingest: ingest.Config{StartPolicies: policies}})
}

// requireDeferred checks a start's answer is 202 deferred, with a command
// id and no execution, and returns the command id.
func requireDeferred(t *testing.T, a stacktest.Answer) string {
	t.Helper()
	require.Equal(t, 202, a.Status, a.Body)
	require.Equal(t, "deferred", a.Body["status"], a.Body)
	require.NotContains(t, a.Body, "execution_id")
	id, _ := a.Body["command_id"].(string)
	require.NotEmpty(t, id)
	return id
}

// commandExecution waits until the deferred command is applied and
// returns the execution it became part of.
func commandExecution(t *testing.T, s *devstack.Stack, commandID string) string {
	t.Helper()
	var got stacktest.Answer
	probe.Until(t, 30*time.Second, "command "+commandID+" to begin its execution", func() bool {
		got = stacktest.Call(t, "GET", s.URL()+"/api/harvest/commands/"+commandID, nil, "")
		return got.Status == 200 && got.Body["status"] == "applied"
	})
	require.EqualValues(t, 201, got.Body["http_status"], got.Body)
	out := got.Body["outcome"].(map[string]any)
	id, _ := out["execution_id"].(string)
	require.NotEmpty(t, id, got.Body)
	return id
}

func createdAt(t *testing.T, s *devstack.Stack, executionID string) time.Time {
	t.Helper()
	var at time.Time
	require.NoError(t, stacktest.ExecDB(s, executionID).QueryRow(context.Background(), `SELECT created_at FROM executions WHERE execution_id = $1`, executionID).Scan(&at))
	return at
}

func TestThrottleDefersStartsAndBeginsThemInOrder(t *testing.T) {
	t.Parallel()
	const period = 2500 * time.Millisecond
	s := policyStack(t, map[string]*startpolicy.Policy{
		"onboarding": policy(t, client.StartPolicy{Throttle: &client.Throttle{Limit: 2, Period: period.String(), Key: "/user_id"}}),
	})
	var executions []string
	var deferred []string
	for i := range 6 {
		a := stacktest.StartWorkflow(t, s, "onboarding", "", fmt.Sprintf(`{"input": {"user_id": 1, "n": %d}}`, i))
		if i < 2 {
			require.Equal(t, 201, a.Status, "within the limit, start %d begins at once: %v", i, a.Body)
			executions = append(executions, a.Body["execution_id"].(string))
			continue
		}
		deferred = append(deferred, requireDeferred(t, a))
	}
	// Another key has its own window.
	other := stacktest.StartWorkflow(t, s, "onboarding", "", `{"input": {"user_id": 2}}`)
	require.Equal(t, 201, other.Status, other.Body)
	// A deferred command reads as deferred until it begins.
	pending := stacktest.Call(t, "GET", s.URL()+"/api/harvest/commands/"+deferred[len(deferred)-1], nil, "")
	require.Equal(t, 200, pending.Status)
	require.Equal(t, "deferred", pending.Body["status"], pending.Body)

	for _, id := range deferred {
		executions = append(executions, commandExecution(t, s, id))
	}
	// One execution per start, begun in the order they came, never more
	// than two within a period.
	require.Len(t, executions, 6)
	var times []time.Time
	for i, id := range executions {
		body := stacktest.WaitCompleted(t, s, id)
		var in map[string]any
		require.NoError(t, json.Unmarshal(mustJSON(t, body["input"]), &in))
		require.EqualValues(t, i, in["n"], "execution %d has start %d's input", i, i)
		times = append(times, createdAt(t, s, id))
	}
	for i := 1; i < len(times); i++ {
		require.False(t, times[i].Before(times[i-1]), "start %d began before start %d", i, i-1)
	}
	for i := 2; i < len(times); i++ {
		require.GreaterOrEqual(t, times[i].Sub(times[i-2]), period-time.Millisecond, "starts %d and %d began within a period", i-2, i)
	}
	require.Equal(t, 7, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
	require.Zero(t, stacktest.DBCount(t, s, `SELECT count(*) FROM deferred_starts`))
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestDebounceCollapsesStartsIntoOne(t *testing.T) {
	t.Parallel()
	s := policyStack(t, map[string]*startpolicy.Policy{
		"onboarding": policy(t, client.StartPolicy{Debounce: &client.Debounce{Period: "1500ms", Key: "/user_id"}}),
	})
	run := func(body func(n int) string) (string, []string) {
		var cmds []string
		for n := 1; n <= 3; n++ {
			cmds = append(cmds, requireDeferred(t, stacktest.StartWorkflow(t, s, "onboarding", "", body(n))))
		}
		var exec string
		for _, id := range cmds {
			got := commandExecution(t, s, id)
			if exec == "" {
				exec = got
			}
			require.Equal(t, exec, got, "every start of the burst answers with one execution")
		}
		stacktest.WaitCompleted(t, s, exec)
		return exec, cmds
	}
	// The configured policy: the last start's input.
	last, _ := run(func(n int) string { return fmt.Sprintf(`{"input": {"user_id": 7, "n": %d}}`, n) })
	var n int
	require.NoError(t, stacktest.ExecDB(s, last).QueryRow(context.Background(), `SELECT (input->>'n')::int FROM executions WHERE execution_id = $1`, last).Scan(&n))
	require.Equal(t, 3, n)
	// A request's own policy: the first start's input.
	first, _ := run(func(n int) string {
		return fmt.Sprintf(`{"input": {"user_id": 8, "n": %d}, "start_policy": {"debounce": {"period": "1500ms", "key": "/user_id", "input": "first"}}}`, n)
	})
	require.NoError(t, stacktest.ExecDB(s, first).QueryRow(context.Background(), `SELECT (input->>'n')::int FROM executions WHERE execution_id = $1`, first).Scan(&n))
	require.Equal(t, 1, n)
	require.Equal(t, 2, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`), "one execution per burst")
	require.Equal(t, 2, stacktest.DBCount(t, s, `SELECT count(*) FROM history_events WHERE type = 'WorkflowStarted'`))
}

func TestBatchStartsOneExecutionWithTheListOfInputs(t *testing.T) {
	t.Parallel()
	const maxWait = 2 * time.Second
	s := policyStack(t, map[string]*startpolicy.Policy{
		"digest": policy(t, client.StartPolicy{Batch: &client.Batch{MaxSize: 3, MaxWait: maxWait.String()}}),
	})
	var cmds []string
	var lastSent time.Time
	for i := 1; i <= 7; i++ {
		lastSent = time.Now() // the last start's is before it is applied
		cmds = append(cmds, requireDeferred(t, stacktest.StartWorkflow(t, s, "digest", "", fmt.Sprintf(`{"input": {"n": %d}}`, i))))
	}
	execs := map[string][]int{}
	var order []string
	for i, id := range cmds {
		e := commandExecution(t, s, id)
		if _, ok := execs[e]; !ok {
			order = append(order, e)
		}
		execs[e] = append(execs[e], i+1)
	}
	require.Equal(t, [][]int{{1, 2, 3}, {4, 5, 6}, {7}}, [][]int{execs[order[0]], execs[order[1]], execs[order[2]]})
	for i, e := range order {
		body := stacktest.WaitCompleted(t, s, e)
		var res struct {
			Count int `json:"count"`
			Items []struct {
				N int `json:"n"`
			} `json:"items"`
		}
		require.NoError(t, json.Unmarshal(mustJSON(t, body["result"]), &res))
		want := execs[e]
		require.Equal(t, len(want), res.Count, "batch %d", i)
		for j, it := range res.Items {
			require.Equal(t, want[j], it.N)
		}
	}
	// The last batch was not full: it began max_wait after its start.
	require.GreaterOrEqual(t, createdAt(t, s, order[2]).Sub(lastSent), maxWait)
}

func TestStartsUnderAPolicyTakeNoKeyButReplaysAreAnswered(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	nurl := natstest.RunServer(t, natstest.Options{}).ClientURL()
	// Before the policy: a keyed start commits.
	before := stacktest.Start(t, devstack.Config{DatabaseURL: db, NATSURL: nurl})
	first := stacktest.StartWorkflow(t, before, "onboarding", "evt-1", `{"input": {"user_id": 1}}`)
	require.Equal(t, 201, first.Status, first.Body)
	stacktest.Stop(t, before)

	s := stacktest.Start(t, devstack.Config{DatabaseURL: db, NATSURL: nurl, Ingest: ingest.Config{StartPolicies: map[string]*startpolicy.Policy{
		"onboarding": policy(t, client.StartPolicy{Throttle: &client.Throttle{Limit: 10, Period: "1m", Key: "/user_id"}}),
	}}})
	// Its replay short-circuits to the execution, whatever the policy.
	replay := stacktest.StartWorkflow(t, s, "onboarding", "evt-1", `{"input": {"user_id": 1}}`)
	require.Equal(t, 200, replay.Status, replay.Body)
	require.Equal(t, first.Body["execution_id"], replay.Body["execution_id"])
	require.Equal(t, true, replay.Body["deduplicated"])

	refused := func(a stacktest.Answer, status int, code, field string) {
		t.Helper()
		require.Equal(t, status, a.Status, a.Body)
		require.Equal(t, code, a.Body["error"], a.Body)
		require.Equal(t, field, a.Body["field"], a.Body)
		require.NotEmpty(t, a.Body["message"])
	}
	// A fresh key is refused: there is no execution to converge on.
	refused(stacktest.StartWorkflow(t, s, "onboarding", "evt-2", `{"input": {"user_id": 1}}`), 400, "idempotency_key_not_allowed", "idempotency_key")
	refused(stacktest.StartWorkflow(t, s, "onboarding", "", `{"input": {"user_id": 1}, "idempotency_key": "evt-3"}`), 400, "idempotency_key_not_allowed", "idempotency_key")
	// So is what the policy decides instead of the caller.
	refused(stacktest.StartWorkflow(t, s, "onboarding", "", `{"input": {"user_id": 1}, "workflow_id": "w"}`), 400, "invalid_workflow_id", "workflow_id")
	refused(stacktest.StartWorkflow(t, s, "onboarding", "", `{"input": {"user_id": 1}, "delay": "1s"}`), 400, "invalid_schedule", "delay")
	refused(stacktest.StartWorkflow(t, s, "onboarding", "", `{"input": {"user_id": 1}, "reuse_policy": "reject_duplicate"}`), 400, "invalid_reuse_policy", "reuse_policy")
	// An input the key selects nothing in, and a bad policy of a request.
	refused(stacktest.StartWorkflow(t, s, "onboarding", "", `{"input": {"name": "x"}}`), 422, "input_invalid", "input")
	refused(stacktest.StartWorkflow(t, s, "onboarding", "", `{"input": {"user_id": 1}, "start_policy": {"throttle": {"limit": 0, "period": "1m"}}}`),
		400, "invalid_start_policy", "start_policy.throttle.limit")
	refused(stacktest.StartWorkflow(t, s, "onboarding", "", `{"input": {"user_id": 1}, "start_policy": {"throttle": {"limit": 1, "period": "1m"}, "batch": {"max_size": 2, "max_wait": "1s"}}}`),
		400, "invalid_start_policy", "start_policy")
	refused(stacktest.StartWorkflow(t, s, "onboarding", "", `{"input": {"user_id": 1}, "start_policy": {"debounce": {"period": "soon"}}}`),
		400, "invalid_start_policy", "start_policy.debounce.period")
	// Hostile input: a key value, or a policy member, holding U+0000.
	nul := stacktest.StartWorkflow(t, s, "onboarding", "", `{"input": {"user_id": "a\u0000"}}`)
	require.Equal(t, 400, nul.Status, nul.Body)
	require.Equal(t, "input", nul.Body["field"], nul.Body)
	nulPolicy := stacktest.StartWorkflow(t, s, "onboarding", "", `{"input": {"user_id": 1}, "start_policy": {"debounce": {"period": "1s", "key": "/a\u0000"}}}`)
	require.Equal(t, 400, nulPolicy.Status, nulPolicy.Body)
	require.Equal(t, "start_policy", nulPolicy.Body["field"], nulPolicy.Body)
	// None of them changed anything.
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM start_claims`))
	require.Zero(t, stacktest.DBCount(t, s, `SELECT count(*) FROM start_policy_keys`))
}

func TestWebhooksUnderAPolicyDedupeByTheEventID(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{
		Webhooks: []webhook.Endpoint{{
			Source: webhook.Source{Name: "stripe", Kind: webhook.KindStripe, Secrets: []string{stacktest.StripeSecret}},
			Rules:  []webhook.Rule{{Event: "payment_intent.succeeded", Workflow: "charge", InputPointer: "/data/object"}},
		}},
		StartPolicies: map[string]*startpolicy.Policy{
			"charge": policy(t, client.StartPolicy{Debounce: &client.Debounce{Period: "1500ms", Key: "/customer_id"}}),
		},
	}})
	event := func(id string, amount int) []byte {
		b, _ := json.Marshal(map[string]any{"id": id, "type": "payment_intent.succeeded",
			"data": map[string]any{"object": map[string]any{"amount_cents": amount, "customer_id": "cus_same"}}})
		return b
	}
	now := time.Now()
	a, b := event("evt_a", 100), event("evt_b", 200)
	require.Equal(t, 202, stacktest.Deliver(t, s, "stripe", a, stacktest.StripeSign(a, now), "application/json").Status)
	require.Equal(t, 202, stacktest.Deliver(t, s, "stripe", b, stacktest.StripeSign(b, now), "application/json").Status)
	again := stacktest.Deliver(t, s, "stripe", a, stacktest.StripeSign(a, now), "application/json")
	require.Equal(t, 200, again.Status, again.Body)
	require.Equal(t, true, again.Body["duplicate"])
	probe.Until(t, 30*time.Second, "the debounced charge to complete", func() bool {
		return stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE status = 'Completed'`) == 1
	})
	var amount int
	require.NoError(t, s.DB.QueryRow(context.Background(), `SELECT (input->>'amount_cents')::int FROM executions`).Scan(&amount))
	require.Equal(t, 200, amount, "the last event's input")
	require.Equal(t, 1, s.Services.Payments.Charges())
	require.Zero(t, stacktest.DBCount(t, s, `SELECT count(*) FROM start_claims`), "no start key was claimed")

	// An event the key selects nothing in is refused, and changes nothing.
	bad, _ := json.Marshal(map[string]any{"id": "evt_c", "type": "payment_intent.succeeded", "data": map[string]any{"object": map[string]any{"amount_cents": 1}}})
	refused := stacktest.Deliver(t, s, "stripe", bad, stacktest.StripeSign(bad, now), "application/json")
	require.Equal(t, 422, refused.Status, refused.Body)
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
}

func TestBindingsUnderAPolicyDedupeByTheMessage(t *testing.T) {
	t.Parallel()
	signups := binding.Binding{Name: "signups", Stream: "SIGNUPS", Subject: "signups.>", Rules: []webhook.Rule{
		{Event: "user.signed_up", Workflow: "digest", InputPointer: "/data"},
	}}
	s := stacktest.Start(t, devstack.Config{Bindings: []binding.Binding{signups}, Ingest: ingest.Config{StartPolicies: map[string]*startpolicy.Policy{
		"digest": policy(t, client.StartPolicy{Batch: &client.Batch{MaxSize: 2, MaxWait: "1m", Key: "/team"}}),
	}}})
	u := stacktest.NewUserStreams(t, s)
	u.Create(jetstream.StreamConfig{Name: "SIGNUPS", Subjects: []string{"signups.>"}})
	msg := func(user int) string {
		return fmt.Sprintf(`{"type": "user.signed_up", "data": {"team": "t1", "user": %d}}`, user)
	}
	u.Publish("signups.new", msg(1), "")
	seq := u.Publish("signups.new", msg(2), "").Sequence
	u.Settled("SIGNUPS", "signups", seq)
	probe.Until(t, 30*time.Second, "the batch to complete", func() bool {
		return stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE status = 'Completed'`) == 1
	})
	var users []int
	require.NoError(t, s.DB.QueryRow(context.Background(), `SELECT array_agg((item->>'user')::int ORDER BY ord) FROM executions,
		jsonb_array_elements(input) WITH ORDINALITY AS x(item, ord)`).Scan(&users))
	require.Equal(t, []int{1, 2}, users)

	// The binding's consumer forgets what it acknowledged: the same
	// messages make the same commands, dropped as duplicates.
	require.NoError(t, u.JetStream().DeleteConsumer(u.Context(), "SIGNUPS", binding.ConsumerPrefix+"signups"))
	u.Settled("SIGNUPS", "signups", seq)
	require.Equal(t, 2, stacktest.BindingCount(t, s, "signups", "duplicate"))
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
	require.Zero(t, stacktest.DBCount(t, s, `SELECT count(*) FROM deferred_starts`))
	require.Zero(t, stacktest.DBCount(t, s, `SELECT count(*) FROM start_claims`))
}
