package harvest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
)

// TestTheLedgerKeepsAResultForTheRetentionAfterItsLastUse: the ledger's
// entries expire the deployment's retention after they were last written,
// and a call that finds one writes it again: an activity whose attempts go
// on for longer than the retention, each within it of the last, never
// runs its effect twice; once nobody asks for it, the entry expires.
func TestTheLedgerKeepsAResultForTheRetentionAfterItsLastUse(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	const retention = 2 * time.Second
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 1, Duplicates: time.Second, Retention: retention, MemoryStorage: true})
	require.NoError(t, err)

	runs := 0
	attempt := 0
	once := func() string {
		attempt++
		ac := &ActivityContext{Context: ctx, ledger: top.Ledger,
			info: ActivityInfo{ExecutionID: "e1", ActivityID: 1, Attempt: attempt}}
		out, err := Once(ac, ActivityKey("charge"), func(context.Context) (string, error) {
			runs++
			return fmt.Sprintf("charged-%d", runs), nil
		})
		require.NoError(t, err)
		return out
	}
	began := time.Now()
	require.Equal(t, "charged-1", once())
	// Attempts a quarter of the retention apart, for twice the retention.
	tick := time.NewTicker(retention / 4)
	defer tick.Stop()
	for time.Since(began) < 2*retention {
		<-tick.C
		require.Equal(t, "charged-1", once(), "attempt %d, %s after the effect", attempt, time.Since(began))
	}
	require.Equal(t, 1, runs)

	require.Eventually(t, func() bool {
		_, err := top.Ledger.Get(ctx, ledgerKey(ActivityKey("charge")))
		return errors.Is(err, jetstream.ErrKeyNotFound)
	}, 10*retention, 50*time.Millisecond, "unused, the entry expires")
	require.Equal(t, "charged-2", once(), "a call after the entry expired runs the effect again")
}
