package historypage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/historypage"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestPagesHoldWhatNATSCarries: on a server that carries 64 KiB, an
// execution's 40 events of 10 kB each come in pages that each fit, in
// order, from the event asked for to the last asked for; an execution
// that does not exist is not_found, a request that makes no sense is
// answered with why, and an event larger than a page comes alone.
func TestPagesHoldWhatNATSCarries(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	require.NoError(t, store.EnsureShards(ctx, db, 1))
	ns := natstest.RunServer(t, natstest.Options{Configure: func(o *server.Options) { o.MaxPayload = 64 << 10 }})
	nc, _ := natstest.Connect(t, ns)

	id := dedup.NewID()
	now := time.Now().UTC().Truncate(time.Microsecond)
	e := &store.Execution{ExecutionID: id, WorkflowName: "wf", WorkflowID: "w-1", TaskQueue: "default", Status: wire.StatusRunning,
		CreatedAt: now, UpdatedAt: now, LastSeq: 41}
	w := &store.Writes{NewExecutions: []*store.Execution{e}}
	for seq := 1; seq <= 40; seq++ {
		attrs, _ := json.Marshal(map[string]string{"v": strings.Repeat(fmt.Sprint(seq%10), 10_000)})
		w.Events = append(w.Events, store.EventRow{ExecutionID: id, Event: wire.Event{Seq: seq, Type: "SignalReceived", At: now, Attrs: attrs}})
	}
	huge, _ := json.Marshal(map[string]string{"v": strings.Repeat("h", 40_000)})
	w.Events = append(w.Events, store.EventRow{ExecutionID: id, Event: wire.Event{Seq: 41, Type: "SignalReceived", At: now, Attrs: huge}})
	require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return store.Write(ctx, tx, w) }))

	srv, err := historypage.Serve(nc, map[int]*pgxpool.Pool{0: db}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	ask := func(req wire.HistoryPageRequest) wire.HistoryPageReply {
		t.Helper()
		data, err := json.Marshal(req)
		require.NoError(t, err)
		m, err := nc.Request(broker.HistoryPageSubject(0), data, 10*time.Second)
		require.NoError(t, err)
		require.LessOrEqual(t, len(m.Data), 64<<10)
		var reply wire.HistoryPageReply
		require.NoError(t, json.Unmarshal(m.Data, &reply))
		return reply
	}

	var got []wire.Event
	pages := 0
	for from := 3; from <= 40; {
		reply := ask(wire.HistoryPageRequest{ExecutionID: id, From: from, To: 40})
		require.Empty(t, reply.Error)
		require.NotEmpty(t, reply.Events)
		got = append(got, reply.Events...)
		from = reply.Events[len(reply.Events)-1].Seq + 1
		pages++
		require.Equal(t, from <= 40, reply.More, "more says events are left")
	}
	require.Greater(t, pages, 3, "pages of at most half of 64 KiB")
	require.Len(t, got, 38)
	for i, ev := range got {
		require.Equal(t, i+3, ev.Seq)
		require.JSONEq(t, string(w.Events[i+2].Attrs), string(ev.Attrs), "attributes byte for byte")
	}

	alone := ask(wire.HistoryPageRequest{ExecutionID: id, From: 41, To: 41})
	require.Len(t, alone.Events, 1, "an event larger than a page comes alone")
	require.False(t, alone.More)

	require.True(t, ask(wire.HistoryPageRequest{ExecutionID: dedup.NewID(), From: 1, To: 5}).NotFound)
	require.Contains(t, ask(wire.HistoryPageRequest{ExecutionID: id, From: 5, To: 2}).Error, "from <= to")
	require.Contains(t, ask(wire.HistoryPageRequest{ExecutionID: strings.ToUpper(id), From: 1, To: 2}).Error, "want an execution id")
	m, err := nc.Request(broker.HistoryPageSubject(0), []byte("{"), 10*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(m.Data), "does not parse")
}
