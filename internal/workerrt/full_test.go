package workerrt

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestAResultWaitsOutAFullCommandStream: while the command stream holds
// its max bytes (the schedulers are not applying commands), a worker
// keeps an attempt's result and publishes it again, rather than handing
// the task back to report the attempt lost; once the stream has room, the
// result itself lands.
func TestAResultWaitsOutAFullCommandStream(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	_, err := broker.Declare(ctx, js, broker.Config{Shards: 1, CommandMaxBytes: broker.MinStreamMaxBytes, MemoryStorage: true})
	require.NoError(t, err)
	// Filled to the last few bytes: large messages, then small ones.
	filler := broker.CommandSubject(0, "filler")
	for _, size := range []int{256 << 10, 1 << 10, 1} {
		for {
			_, err := js.Publish(ctx, filler, make([]byte, size))
			if err != nil {
				require.ErrorContains(t, err, "maximum bytes exceeded")
				break
			}
		}
	}
	// Every publish reaches a plain subscriber, whether the stream
	// stores it or not.
	commands, err := nc.SubscribeSync(broker.CommandFilter(0))
	require.NoError(t, err)
	runRuntime(t, nc, Registration{Activities: []string{"double"}}, Handlers{
		Workflow:    func(string) (WorkflowFunc, bool) { return nil, false },
		HasActivity: func(name string) bool { return name == "double" },
		Activity:    double(errors.New("boom")),
		Failure:     func(err error) *wire.Failure { return &wire.Failure{Type: "test", Message: err.Error()} },
	})
	publishTask(t, nc, wire.ActivityTask{ExecutionID: "e1", ActivityID: 1, ActivityName: "double",
		Input: json.RawMessage(`21`), Attempt: 1, Deadline: time.Now().Add(time.Minute)})
	first := nextCommand(t, commands)
	require.Equal(t, wire.KindActivityResult, first.Kind, "the result was published, and refused")

	st, err := js.Stream(ctx, broker.CommandStream)
	require.NoError(t, err)
	require.NoError(t, st.Purge(ctx, jetstream.WithPurgeSubject(filler)), "the schedulers catch up")
	var stored wire.Command
	require.Eventually(t, func() bool {
		m, err := st.GetLastMsgForSubject(ctx, broker.CommandSubject(0, wire.KindActivityResult))
		return err == nil && json.Unmarshal(m.Data, &stored) == nil
	}, 20*time.Second, 20*time.Millisecond)
	require.Nil(t, stored.Activity.Failure, "the attempt's own result, not a report of it lost")
	require.JSONEq(t, `42`, string(stored.Activity.Result))
}
