package workerrt_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/wire"
	"github.com/harvest-engine/harvest/internal/workerrt"
)

// TestConsumersPullWithAShortExpiry checks that the scheduler's and the
// worker's pull requests (broker.Pull) expire within broker.PullExpiry,
// not nats.go's default 30 s: a request the server lost is asked again
// that soon.
func TestConsumersPullWithAShortExpiry(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t, natstest.Options{})
	nc, _ := natstest.Connect(t, ns)
	var (
		mu      sync.Mutex
		expires = map[string]time.Duration{} // by stream.consumer
	)
	const prefix = "$JS.API.CONSUMER.MSG.NEXT."
	sub, err := nc.Subscribe(prefix+">", func(m *nats.Msg) {
		var req struct {
			Expires time.Duration `json:"expires"`
		}
		if json.Unmarshal(m.Data, &req) != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		expires[strings.TrimPrefix(m.Subject, prefix)] = req.Expires
	})
	require.NoError(t, err)
	defer sub.Unsubscribe()

	stacktest.Start(t, devstack.Config{NATSURL: ns.ClientURL()})
	want := []string{
		broker.CommandStream + ".harvest_sched_0",
		broker.TaskStream + "." + workerrt.NameConsumerName(wire.DefaultTaskQueue, wire.TaskWorkflow, examples.WorkflowCharge),
		broker.TaskStream + "." + workerrt.NameConsumerName(wire.DefaultTaskQueue, wire.TaskActivity, examples.ActivityChargeCard),
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range want {
			if _, ok := expires[c]; !ok {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "a pull request from each consumer")
	mu.Lock()
	defer mu.Unlock()
	for _, c := range want {
		require.LessOrEqual(t, expires[c], broker.PullExpiry, c)
		require.Greater(t, expires[c], broker.PullExpiry*9/10, c)
	}
}

// TestConsumersDeletedUnderTheStackAreCreatedAgain: the scheduler's and
// the worker's consumers, deleted under a running stack (an operator's
// mistake, a JetStream store lost), are created again, and work started
// afterwards completes.
func TestConsumersDeletedUnderTheStackAreCreatedAgain(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	ctx := natstest.Context(t)
	js := s.Topology.JS
	first := stacktest.StartWorkflow(t, s, "charge", "before-delete", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 201, first.Status, first.Body)
	stacktest.WaitCompleted(t, s, first.Body["execution_id"].(string))

	consumers := [][2]string{
		{broker.CommandStream, "harvest_sched_0"},
		{broker.TaskStream, workerrt.NameConsumerName(wire.DefaultTaskQueue, wire.TaskWorkflow, examples.WorkflowCharge)},
		{broker.TaskStream, workerrt.NameConsumerName(wire.DefaultTaskQueue, wire.TaskActivity, examples.ActivityChargeCard)},
	}
	for _, c := range consumers {
		require.NoError(t, js.DeleteConsumer(ctx, c[0], c[1]), c[1])
	}
	probe.Until(t, 30*time.Second, "the consumers to be created again", func() bool {
		for _, c := range consumers {
			if _, err := js.Consumer(ctx, c[0], c[1]); err != nil {
				return false
			}
		}
		return true
	})
	second := stacktest.StartWorkflow(t, s, "charge", "after-delete", `{`+stacktest.ChargeInput+`}`)
	require.Contains(t, []int{201, 202}, second.Status, second.Body)
	probe.Until(t, 30*time.Second, "the charge started after the deletion to complete", func() bool {
		return stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE idempotency_key = 'after-delete' AND status = 'Completed'`) == 1
	})
}
