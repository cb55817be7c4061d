package devstack_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// storesStack starts a stack whose executions are spread over the named
// stores, each a database of the test PostgreSQL, with shards shards each;
// modes gives a store's mode (writable by default).
func storesStack(t *testing.T, nats string, dbs map[string]string, names []string, modes map[string]placement.Mode, shards int) *devstack.Stack {
	t.Helper()
	cfg := devstack.Config{NATSURL: nats, Streams: broker.Config{Shards: shards}}
	for _, name := range names {
		if dbs[name] == "" {
			dbs[name] = pgtest.NewDatabase(t)
		}
		mode := modes[name]
		if mode == "" {
			mode = placement.Writable
		}
		cfg.Stores = append(cfg.Stores, devstack.StoreConfig{Name: name, DatabaseURL: dbs[name], Mode: mode})
	}
	cfg.DatabaseURL = dbs[names[0]]
	return stacktest.Start(t, cfg)
}

// perStore counts the executions in each store of the stack.
func perStore(t *testing.T, s *devstack.Stack, sql string, args ...any) []int {
	t.Helper()
	out := make([]int, len(s.Pools))
	for i, db := range s.Pools {
		require.NoError(t, db.QueryRow(context.Background(), sql, args...).Scan(&out[i]))
	}
	return out
}

func TestTwoAndThreeStoresSpreadExecutionsAndServeThem(t *testing.T) {
	t.Parallel()
	for _, names := range [][]string{{"a", "b"}, {"a", "b", "c"}} {
		t.Run(fmt.Sprint(len(names)), func(t *testing.T) {
			s := storesStack(t, natstest.RunServer(t, natstest.Options{}).ClientURL(), map[string]string{}, names, nil, 2)
			layout := s.Topology.Layout()
			const n = 60
			ids := make([]string, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					key := fmt.Sprintf("k-%d", i)
					a := stacktest.StartWorkflow(t, s, "charge", key, `{`+stacktest.ChargeInput+`}`)
					require.Equal(t, 201, a.Status, a.Body)
					ids[i] = a.Body["execution_id"].(string)
					// A retry converges, whichever store the key is on.
					again := stacktest.StartWorkflow(t, s, "charge", key, `{`+stacktest.ChargeInput+`}`)
					require.Equal(t, 200, again.Status, again.Body)
					require.Equal(t, ids[i], again.Body["execution_id"])
				})
			}
			wg.Wait()
			counts := perStore(t, s, `SELECT count(*) FROM executions`)
			total := 0
			for i, c := range counts {
				require.Positive(t, c, "store %s has none of %d executions: %v", names[i], n, counts)
				total += c
			}
			require.Equal(t, n, total)
			for i, id := range ids {
				// The execution id names its store, and it is there.
				st := layout.StoreOf(id)
				var found int
				require.NoError(t, s.Pools[st].QueryRow(context.Background(), `SELECT count(*) FROM executions WHERE execution_id = $1`, id).Scan(&found))
				require.Equal(t, 1, found, "execution %d", i)
				stacktest.WaitCompleted(t, s, id)
			}
			require.Equal(t, n, s.Services.Payments.Charges(), "one charge per key")
			// Listings gather every store's, newest first, across pages.
			seen := map[string]bool{}
			cursor := ""
			for {
				page := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions?limit=7&workflow=charge"+cursor, nil, "")
				require.Equal(t, 200, page.Status, page.Body)
				for _, e := range page.Body["executions"].([]any) {
					id := e.(map[string]any)["execution_id"].(string)
					require.False(t, seen[id], "%s listed twice", id)
					seen[id] = true
				}
				next, _ := page.Body["next_cursor"].(string)
				if next == "" {
					break
				}
				cursor = "&cursor=" + next
			}
			require.Len(t, seen, n)
			wf := stacktest.Call(t, "GET", s.URL()+"/api/harvest/workflows", nil, "")
			require.Equal(t, 200, wf.Status)
			var charged float64
			for _, w := range wf.Body["workflows"].([]any) {
				if m := w.(map[string]any); m["name"] == "charge" {
					charged = m["counts"].(map[string]any)["Completed"].(float64)
				}
			}
			require.EqualValues(t, n, charged)
		})
	}
}

func TestSignalsAndExplicitWorkflowIDsAcrossStores(t *testing.T) {
	t.Parallel()
	s := storesStack(t, natstest.RunServer(t, natstest.Options{}).ClientURL(), map[string]string{}, []string{"a", "b"}, nil, 1)
	var ids []string
	for i := range 12 {
		a := stacktest.StartWorkflow(t, s, "collect", "", fmt.Sprintf(`{"input": {"count": 1}, "workflow_id": "order-%d", "reuse_policy": "reject_duplicate"}`, i))
		require.Equal(t, 201, a.Status, a.Body)
		ids = append(ids, a.Body["execution_id"].(string))
		// reject_duplicate sees the workflow_id's execution on its store.
		dup := stacktest.StartWorkflow(t, s, "collect", "", fmt.Sprintf(`{"input": {"count": 1}, "workflow_id": "order-%d", "reuse_policy": "reject_duplicate"}`, i))
		require.Equal(t, 409, dup.Status, dup.Body)
	}
	require.NotContains(t, perStore(t, s, `SELECT count(*) FROM executions`), 0, "both stores hold some")
	for _, id := range ids {
		for range 2 {
			a := stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+id+"/signals/item", map[string]string{"Idempotency-Key": "evt"}, `"x"`)
			require.Equal(t, 202, a.Status, a.Body)
		}
		body := stacktest.WaitCompleted(t, s, id)
		require.Equal(t, map[string]any{"items": []any{"x"}}, body["result"])
	}
}

// TestADrainSendsNewStartsElsewhere: with b drained (read_only), its
// running executions finish, reads and replays still find them, and new
// starts go to a.
func TestADrainSendsNewStartsElsewhere(t *testing.T) {
	t.Parallel()
	nats := natstest.RunServer(t, natstest.Options{}).ClientURL()
	dbs := map[string]string{}
	before := storesStack(t, nats, dbs, []string{"a", "b"}, nil, 1)
	layout := before.Topology.Layout()
	var onB []string
	for i := 0; len(onB) < 3; i++ {
		a := stacktest.StartWorkflow(t, before, "sleep", fmt.Sprintf("s-%d", i), `{"input": {"duration": "1500ms"}}`)
		require.Equal(t, 201, a.Status, a.Body)
		if id := a.Body["execution_id"].(string); layout.StoreOf(id) == 1 {
			onB = append(onB, fmt.Sprintf("s-%d", i), id)
		}
	}
	pinned := stacktest.StartWorkflow(t, before, "sleep", "pinned-b", `{"input": {"duration": "1ms"}, "store": "b"}`)
	require.Equal(t, 201, pinned.Status, pinned.Body)
	stacktest.Stop(t, before)

	s := storesStack(t, nats, dbs, []string{"a", "b"}, map[string]placement.Mode{"b": placement.ReadOnly}, 1)
	// A keyed retry of a start pinned to b, now read_only: its replay
	// comes first, from b.
	again := stacktest.StartWorkflow(t, s, "sleep", "pinned-b", `{"input": {"duration": "1ms"}, "store": "b"}`)
	require.Equal(t, 200, again.Status, again.Body)
	require.Equal(t, pinned.Body["execution_id"], again.Body["execution_id"])
	bStarts := perStore(t, s, `SELECT count(*) FROM executions`)[1]
	// b's running executions finish: its scheduler still applies it.
	for i := 0; i < len(onB); i += 2 {
		stacktest.WaitCompleted(t, s, onB[i+1])
		// A replay of its key is a lookup: it finds it on b.
		a := stacktest.StartWorkflow(t, s, "sleep", onB[i], `{"input": {"duration": "1500ms"}}`)
		require.Equal(t, 200, a.Status, a.Body)
		require.Equal(t, onB[i+1], a.Body["execution_id"])
	}
	for i := range 20 {
		a := stacktest.StartWorkflow(t, s, "onboarding", fmt.Sprintf("new-%d", i), `{"input": {"user_id": 1}}`)
		require.Equal(t, 201, a.Status, a.Body)
		require.Zero(t, s.Topology.Layout().StoreOf(a.Body["execution_id"].(string)), "a new start on the drained store")
	}
	require.Equal(t, bStarts, perStore(t, s, `SELECT count(*) FROM executions`)[1], "b takes no new executions")
	probe.Until(t, 30*time.Second, "every execution to complete", func() bool {
		return stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE status <> 'Completed'`) == 0
	})
}

// TestPinnedStartsGoToTheirStoreOrAreRefused: a start pinned to a store
// goes there, its keyed retries meet there; one pinned to a drained or
// unknown store is refused, never placed elsewhere.
func TestPinnedStartsGoToTheirStoreOrAreRefused(t *testing.T) {
	t.Parallel()
	s := storesStack(t, natstest.RunServer(t, natstest.Options{}).ClientURL(), map[string]string{}, []string{"a", "b", "c"},
		map[string]placement.Mode{"c": placement.ReadOnly}, 1)
	layout := s.Topology.Layout()
	for i := range 6 {
		key := fmt.Sprintf("pin-%d", i)
		a := stacktest.StartWorkflow(t, s, "charge", key, `{`+stacktest.ChargeInput+`, "store": "b"}`)
		require.Equal(t, 201, a.Status, a.Body)
		id := a.Body["execution_id"].(string)
		require.Equal(t, 1, layout.StoreOf(id), "pinned to b")
		again := stacktest.StartWorkflow(t, s, "charge", key, `{`+stacktest.ChargeInput+`, "store": "b"}`)
		require.Equal(t, 200, again.Status, again.Body)
		require.Equal(t, id, again.Body["execution_id"])
		stacktest.WaitCompleted(t, s, id)
	}
	for store, why := range map[string]string{"c": "read_only", "z": "unknown store"} {
		a := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "store": "`+store+`"}`)
		require.Equal(t, 400, a.Status, a.Body)
		require.Equal(t, "invalid_store", a.Body["error"])
		require.Equal(t, "store", a.Body["field"])
		require.Contains(t, a.Body["message"], why)
	}
	require.Equal(t, []int{0, 6, 0}, perStore(t, s, `SELECT count(*) FROM executions`))
}

// TestDeadCommandsAcrossStores: each store numbers its dead commands; the
// API's ids keep the first store's numbers and tell the others' apart,
// whatever stores come after.
func TestDeadCommandsAcrossStores(t *testing.T) {
	t.Parallel()
	s := storesStack(t, natstest.RunServer(t, natstest.Options{}).ClientURL(), map[string]string{}, []string{"a", "b"}, nil, 1)
	ctx := natstest.Context(t)
	for shard := range 2 {
		cmd := &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindStart, Start: &wire.StartCommand{
			WorkflowName: "charge", WorkflowID: fmt.Sprintf("poison\x00%d", shard), TaskQueue: wire.DefaultTaskQueue}}
		_, err := s.Topology.PublishCommand(ctx, shard, cmd)
		require.NoError(t, err)
	}
	var ids []float64
	probe.Until(t, 30*time.Second, "both to be set aside", func() bool {
		page := stacktest.Call(t, "GET", s.URL()+"/api/harvest/commands/dead", nil, "")
		ids = nil
		for _, d := range page.Body["dead_commands"].([]any) {
			ids = append(ids, d.(map[string]any)["id"].(float64))
		}
		return len(ids) == 2
	})
	require.Equal(t, []float64{1<<46 | 1, 1}, ids, "store b's first, then store a's, which keeps its own number")
	for _, id := range ids {
		d := stacktest.Call(t, "GET", fmt.Sprintf("%s/api/harvest/commands/dead/%d", s.URL(), int64(id)), nil, "")
		require.Equal(t, 200, d.Status, d.Body)
		require.Equal(t, id, d.Body["id"])
		require.EqualValues(t, int64(id)>>46, d.Body["shard"], "the shard of its store")
	}
	// Paging by id crosses from one store to the other.
	page := stacktest.Call(t, "GET", fmt.Sprintf("%s/api/harvest/commands/dead?before=%d", s.URL(), int64(ids[0])), nil, "")
	require.Len(t, page.Body["dead_commands"].([]any), 1)
	require.Equal(t, 404, stacktest.Call(t, "GET", fmt.Sprintf("%s/api/harvest/commands/dead/%d", s.URL(), int64(2)<<46|1), nil, "").Status)
}
