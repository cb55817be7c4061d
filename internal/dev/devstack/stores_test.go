package devstack_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
	return startStack(t, cfg)
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
					a := start(t, s, "charge", key, `{`+chargeInput+`}`)
					require.Equal(t, 201, a.status, a.body)
					ids[i] = a.body["execution_id"].(string)
					// A retry converges, whichever store the key is on.
					again := start(t, s, "charge", key, `{`+chargeInput+`}`)
					require.Equal(t, 200, again.status, again.body)
					require.Equal(t, ids[i], again.body["execution_id"])
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
				waitCompleted(t, s, id)
			}
			require.Equal(t, n, s.Services.Payments.Charges(), "one charge per key")
			// Listings gather every store's, newest first, across pages.
			seen := map[string]bool{}
			cursor := ""
			for {
				page := call(t, "GET", s.URL()+"/api/harvest/executions?limit=7&workflow=charge"+cursor, nil, "")
				require.Equal(t, 200, page.status, page.body)
				for _, e := range page.body["executions"].([]any) {
					id := e.(map[string]any)["execution_id"].(string)
					require.False(t, seen[id], "%s listed twice", id)
					seen[id] = true
				}
				next, _ := page.body["next_cursor"].(string)
				if next == "" {
					break
				}
				cursor = "&cursor=" + next
			}
			require.Len(t, seen, n)
			wf := call(t, "GET", s.URL()+"/api/harvest/workflows", nil, "")
			require.Equal(t, 200, wf.status)
			var charged float64
			for _, w := range wf.body["workflows"].([]any) {
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
		a := start(t, s, "collect", "", fmt.Sprintf(`{"input": {"count": 1}, "workflow_id": "order-%d", "reuse_policy": "reject_duplicate"}`, i))
		require.Equal(t, 201, a.status, a.body)
		ids = append(ids, a.body["execution_id"].(string))
		// reject_duplicate sees the workflow_id's execution on its store.
		dup := start(t, s, "collect", "", fmt.Sprintf(`{"input": {"count": 1}, "workflow_id": "order-%d", "reuse_policy": "reject_duplicate"}`, i))
		require.Equal(t, 409, dup.status, dup.body)
	}
	require.NotContains(t, perStore(t, s, `SELECT count(*) FROM executions`), 0, "both stores hold some")
	for _, id := range ids {
		for range 2 {
			a := call(t, "POST", s.URL()+"/api/harvest/workflows/"+id+"/signal/item", map[string]string{"Idempotency-Key": "evt"}, `"x"`)
			require.Equal(t, 202, a.status, a.body)
		}
		body := waitCompleted(t, s, id)
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
		a := start(t, before, "sleep", fmt.Sprintf("s-%d", i), `{"input": {"duration": "1500ms"}}`)
		require.Equal(t, 201, a.status, a.body)
		if id := a.body["execution_id"].(string); layout.StoreOf(id) == 1 {
			onB = append(onB, fmt.Sprintf("s-%d", i), id)
		}
	}
	pinned := start(t, before, "sleep", "pinned-b", `{"input": {"duration": "1ms"}, "store": "b"}`)
	require.Equal(t, 201, pinned.status, pinned.body)
	stopStack(t, before)

	s := storesStack(t, nats, dbs, []string{"a", "b"}, map[string]placement.Mode{"b": placement.ReadOnly}, 1)
	// A keyed retry of a start pinned to b, now read_only: its replay
	// comes first, from b.
	again := start(t, s, "sleep", "pinned-b", `{"input": {"duration": "1ms"}, "store": "b"}`)
	require.Equal(t, 200, again.status, again.body)
	require.Equal(t, pinned.body["execution_id"], again.body["execution_id"])
	bStarts := perStore(t, s, `SELECT count(*) FROM executions`)[1]
	// b's running executions finish: its scheduler still applies it.
	for i := 0; i < len(onB); i += 2 {
		waitCompleted(t, s, onB[i+1])
		// A replay of its key is a lookup: it finds it on b.
		a := start(t, s, "sleep", onB[i], `{"input": {"duration": "1500ms"}}`)
		require.Equal(t, 200, a.status, a.body)
		require.Equal(t, onB[i+1], a.body["execution_id"])
	}
	for i := range 20 {
		a := start(t, s, "onboarding", fmt.Sprintf("new-%d", i), `{"input": {"user_id": 1}}`)
		require.Equal(t, 201, a.status, a.body)
		require.Zero(t, s.Topology.Layout().StoreOf(a.body["execution_id"].(string)), "a new start on the drained store")
	}
	require.Equal(t, bStarts, perStore(t, s, `SELECT count(*) FROM executions`)[1], "b takes no new executions")
	eventually(t, 30*time.Second, "every execution to complete", func() bool {
		return dbCount(t, s, `SELECT count(*) FROM executions WHERE status <> 'Completed'`) == 0
	})
}

// testStores is how many stores the stacks of startStack have: 1, unless
// HARVEST_TEST_STORES says more (TestTheContractHoldsOnTwoStores sets it).
func testStores() int {
	n, err := strconv.Atoi(os.Getenv("HARVEST_TEST_STORES"))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// contractTests are the tests of the start, signal and activity paths'
// contract that TestTheContractHoldsOnTwoStores runs again on stacks of
// two stores.
var contractTests = []string{
	// Not TestDedupeIgnoresWorkflowIDAndRoutesMintedIDs: retries of one
	// key with different explicit workflow_ids are placed by their
	// workflow_ids, and keyed dedup is store-local (the seed's
	// consistency caveat, docs/deploy.md).
	"TestStartKeySources", "TestReusePolicies", "TestMalformedBodyReplaysACommittedKey",
	"TestFingerprintChecking", "TestInputSchemaValidation",
	"TestKeyedSignalsLandOnce", "TestSignalScopeAndErrors", "TestCollectManySignals", "TestSleepSurvivesOnADurableTimer", "TestSignalWithStart",
	"TestActivityRetries", "TestHeartbeatsAndReconcile", "TestScheduleToCloseBoundsAllAttempts", "TestCancellingAWorkflowCancelsItsActivities",
	"TestKeyedStartAndRetry", "TestConcurrentSameKeyStartsMakeOneExecution", "TestUnkeyedStartAndErrors",
	"TestDelayedStartsWaitOnADurableTimer", "TestCompletionCallbacks", "TestOnceRunsAnEffectOncePerKey", "TestEveryInvocationGetsItsOwnKey",
	"TestClientStartWaitAndRead", "TestClientSignals",
	"TestThrottleDefersStartsAndBeginsThemInOrder", "TestDebounceCollapsesStartsIntoOne", "TestBatchStartsOneExecutionWithTheListOfInputs",
}

// TestTheContractHoldsOnTwoStores runs the contract tests of the start,
// signal and activity paths again, in a process of their own (this test
// binary, run again), on stacks whose executions are spread over two
// stores.
func TestTheContractHoldsOnTwoStores(t *testing.T) {
	if testStores() > 1 {
		t.Skip("runs the others")
	}
	if testing.Short() {
		t.Skip("runs the contract tests again")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^("+strings.Join(contractTests, "|")+")$", "-test.count=1", "-test.timeout=10m", "-test.v")
	cmd.Env = append(os.Environ(), "HARVEST_TEST_STORES=2")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the contract tests on two stores:\n%s", out)
	for _, name := range contractTests {
		require.Contains(t, string(out), "--- PASS: "+name+" ", "%s did not pass on two stores", name)
	}
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
		a := start(t, s, "charge", key, `{`+chargeInput+`, "store": "b"}`)
		require.Equal(t, 201, a.status, a.body)
		id := a.body["execution_id"].(string)
		require.Equal(t, 1, layout.StoreOf(id), "pinned to b")
		again := start(t, s, "charge", key, `{`+chargeInput+`, "store": "b"}`)
		require.Equal(t, 200, again.status, again.body)
		require.Equal(t, id, again.body["execution_id"])
		waitCompleted(t, s, id)
	}
	for store, why := range map[string]string{"c": "read_only", "z": "unknown store"} {
		a := start(t, s, "charge", "", `{`+chargeInput+`, "store": "`+store+`"}`)
		require.Equal(t, 400, a.status, a.body)
		require.Equal(t, "invalid_store", a.body["error"])
		require.Equal(t, "store", a.body["field"])
		require.Contains(t, a.body["message"], why)
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
	eventually(t, 30*time.Second, "both to be set aside", func() bool {
		page := call(t, "GET", s.URL()+"/api/harvest/commands/dead", nil, "")
		ids = nil
		for _, d := range page.body["dead_commands"].([]any) {
			ids = append(ids, d.(map[string]any)["id"].(float64))
		}
		return len(ids) == 2
	})
	require.Equal(t, []float64{1<<46 | 1, 1}, ids, "store b's first, then store a's, which keeps its own number")
	for _, id := range ids {
		d := call(t, "GET", fmt.Sprintf("%s/api/harvest/commands/dead/%d", s.URL(), int64(id)), nil, "")
		require.Equal(t, 200, d.status, d.body)
		require.Equal(t, id, d.body["id"])
		require.EqualValues(t, int64(id)>>46, d.body["shard"], "the shard of its store")
	}
	// Paging by id crosses from one store to the other.
	page := call(t, "GET", fmt.Sprintf("%s/api/harvest/commands/dead?before=%d", s.URL(), int64(ids[0])), nil, "")
	require.Len(t, page.body["dead_commands"].([]any), 1)
	require.Equal(t, 404, call(t, "GET", fmt.Sprintf("%s/api/harvest/commands/dead/%d", s.URL(), int64(2)<<46|1), nil, "").status)
}
