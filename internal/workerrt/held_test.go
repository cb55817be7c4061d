package workerrt

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// progressMsg counts the in-progress acknowledgements of a task message.
type progressMsg struct {
	jetstream.Msg
	progress atomic.Int32
}

func (m *progressMsg) InProgress() error { m.progress.Add(1); return nil }

func (m *progressMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{NumDelivered: 1}, nil
}

// TestKeeperKeepsHeldTasksInProgress: a held task is acknowledged in
// progress every interval until it is let go or dropped.
func TestKeeperKeepsHeldTasksInProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := newKeeper(time.Second, slog.New(slog.DiscardHandler))
		defer k.close()
		kept, letGo, dropped := &progressMsg{}, &progressMsg{}, &progressMsg{}
		k.hold(kept)
		lg := k.hold(letGo)
		lg.keepUntil(time.Now().Add(1500 * time.Millisecond))
		d := k.hold(dropped)

		time.Sleep(2500 * time.Millisecond) // ticks at 1 s and 2 s
		synctest.Wait()
		require.EqualValues(t, 2, kept.progress.Load())
		require.EqualValues(t, 1, letGo.progress.Load(), "not after its limit")
		require.EqualValues(t, 2, dropped.progress.Load())
		k.drop(d)
		lg.keepUntil(time.Time{}) // kept again

		time.Sleep(time.Second)
		synctest.Wait()
		require.EqualValues(t, 3, kept.progress.Load())
		require.EqualValues(t, 2, letGo.progress.Load())
		require.EqualValues(t, 2, dropped.progress.Load(), "not once dropped")
		require.Equal(t, uint64(1), lg.delivery())
	})
}
