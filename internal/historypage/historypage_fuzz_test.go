package historypage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// fuzzExecution is the execution the fuzzed requests read: fixed, so
// that the seeds and the corpus name it. fuzzEvents is its history's
// length: events of 100 bytes to 12 kB, so that pages of the server's
// 64 KiB hold some of them.
const (
	fuzzExecution = "01900000-0000-7000-8000-000000000001"
	fuzzEvents    = 40
)

// FuzzHistoryPage answers fuzzed request bytes as the responder answers
// a worker's wire.HistoryPageRequest, from a PostgreSQL that holds one
// execution of fuzzEvents events, on a NATS server that carries 64 KiB:
//   - nothing panics, and the reply is exactly one of a page, not_found
//     or an error, and fits in what NATS carries;
//   - bytes that do not parse are refused as such; a request for
//     another execution is not_found;
//   - a request that makes sense (a canonical execution id, 1 <= from <=
//     to <= the largest seq PostgreSQL stores) is answered with a page: the events from `from` on, in order
//     and without a gap, none past `to`, at least one when there is one
//     to give, no more than max_bytes of them beyond the first (half
//     what NATS carries when max_bytes is not in (0, that]), and more
//     set exactly when events up to `to` are left.
func FuzzHistoryPage(f *testing.F) {
	for _, req := range []string{
		`{"execution_id": "%[1]s", "from": 1, "to": 40}`, `{"execution_id": "%[1]s", "from": 3, "to": 3}`,
		`{"execution_id": "%[1]s", "from": 39, "to": 100}`, `{"execution_id": "%[1]s", "from": 41, "to": 41}`,
		`{"execution_id": "%[1]s", "from": 1, "to": 40, "max_bytes": 1}`, `{"execution_id": "%[1]s", "from": 1, "to": 40, "max_bytes": -5}`,
		`{"execution_id": "%[1]s", "from": 1, "to": 40, "max_bytes": 9223372036854775807}`,
		`{"execution_id": "%[1]s", "from": 0, "to": 5}`, `{"execution_id": "%[1]s", "from": -1, "to": 5}`, `{"execution_id": "%[1]s", "from": 5, "to": 2}`,
		`{"execution_id": "%[1]s", "from": 1, "to": 2147483647}`, `{"execution_id": "%[1]s", "from": 1, "to": 2147483648}`,
		`{"execution_id": "%[1]s", "from": 2147483648, "to": 9223372036854775807}`, `{"execution_id": "%[1]s", "from": 1e3, "to": 2}`,
		`{"execution_id": "%[1]s", "from": 1.5, "to": 2}`, `{"execution_id": "%[1]s", "from": "1", "to": 2}`,
		`{"execution_id": "%[1]s", "from": 1, "to": 99999999999999999999}`, `{"execution_id": "%[1]s", "from": 1, "to": 2, "extra": [1]}`,
		`{"execution_id": "01900000-0000-7000-8000-000000000002", "from": 1, "to": 5}`, `{"execution_id": "01900000-0000-7000-8000-00000000000A", "from": 1, "to": 5}`,
		`{"execution_id": "{01900000-0000-7000-8000-000000000001}", "from": 1, "to": 5}`, `{"execution_id": "urn:uuid:01900000-0000-7000-8000-000000000001", "from": 1, "to": 5}`,
		`{"execution_id": "", "from": 1, "to": 5}`, `{"execution_id": 1}`, `{}`, `null`, `[]`, ``, `{`, `"x"`, "{\"execution_id\": \"\xff\"}",
		`{"EXECUTION_ID": "%[1]s", "From": 2, "TO": 4}`, `{"execution_id": "%[1]s", "from": 1, "to": 2, "from": 7}`,
	} {
		f.Add([]byte(fmt.Sprintf(req, fuzzExecution)))
	}

	db := pgtest.NewPool(f)
	ctx := context.Background()
	require.NoError(f, store.EnsureShards(ctx, db, 1))
	ns := natstest.RunServer(f, natstest.Options{Configure: func(o *server.Options) { o.MaxPayload = 64 << 10 }})
	nc, _ := natstest.Connect(f, ns)
	now := time.Now().UTC().Truncate(time.Microsecond)
	w := &store.Writes{NewExecutions: []*store.Execution{{ExecutionID: fuzzExecution, WorkflowName: "wf", WorkflowID: "w-1",
		TaskQueue: "default", Status: wire.StatusRunning, CreatedAt: now, UpdatedAt: now, LastSeq: fuzzEvents}}}
	for seq := 1; seq <= fuzzEvents; seq++ {
		attrs, _ := json.Marshal(map[string]string{"v": strings.Repeat(fmt.Sprint(seq%10), 100+(seq*997)%12_000)})
		w.Events = append(w.Events, store.EventRow{ExecutionID: fuzzExecution, Event: wire.Event{Seq: seq, Type: wire.EventSignalReceived, At: now, Attrs: attrs}})
	}
	require.NoError(f, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return store.Write(ctx, tx, w) }))
	s := &Server{nc: nc, log: slog.New(slog.DiscardHandler)}
	pageLimit := int((nc.MaxPayload() - replyHeadroom) / 2)

	f.Fuzz(func(t *testing.T, data []byte) {
		var req wire.HistoryPageRequest
		reply := s.page(data, &req, db)
		out, err := json.Marshal(reply)
		require.NoError(t, err)
		require.LessOrEqual(t, int64(len(out)), nc.MaxPayload(), "the reply fits in what NATS carries")

		// Exactly one kind of answer.
		kinds := 0
		for _, k := range []bool{reply.Error != "", reply.NotFound, reply.Events != nil} {
			if k {
				kinds++
			}
		}
		require.Equal(t, 1, kinds, "%s: %+v", data, reply)

		var parsed wire.HistoryPageRequest
		if json.Unmarshal(data, &parsed) != nil {
			require.Contains(t, reply.Error, "does not parse", "%s", data)
			return
		}
		u, err := uuid.Parse(parsed.ExecutionID)
		sensible := err == nil && u.String() == parsed.ExecutionID && parsed.From >= 1 && parsed.To >= parsed.From && parsed.To <= math.MaxInt32
		if !sensible {
			require.NotEmpty(t, reply.Error, "%s: %+v", data, reply)
			return
		}
		require.Empty(t, reply.Error, "%s: a request that makes sense is answered", data)
		if parsed.ExecutionID != fuzzExecution {
			require.True(t, reply.NotFound, "%s", data)
			return
		}
		require.False(t, reply.NotFound, "%s", data)

		// A page.
		last := min(parsed.To, fuzzEvents)
		if parsed.From > last {
			require.Empty(t, reply.Events, "%s", data)
			require.False(t, reply.More, "%s", data)
			return
		}
		require.NotEmpty(t, reply.Events, "%s: events %d to %d exist", data, parsed.From, last)
		limit := parsed.MaxBytes
		if limit <= 0 || limit > pageLimit {
			limit = pageLimit
		}
		size := 0
		for i, ev := range reply.Events {
			require.Equal(t, parsed.From+i, ev.Seq, "%s: in order, without a gap", data)
			require.Equal(t, wire.EventSignalReceived, ev.Type)
			size += len(ev.Type) + len(ev.Attrs)
			if i > 0 {
				require.LessOrEqual(t, size, limit, "%s: the page holds at most max_bytes beyond its first event", data)
			}
		}
		end := reply.Events[len(reply.Events)-1].Seq
		require.LessOrEqual(t, end, last, "%s", data)
		require.Equal(t, end < last, reply.More, "%s: more says events up to to are left", data)
		require.True(t, bytes.Contains(out, []byte(`"events"`)), "%s", out)
	})
}
