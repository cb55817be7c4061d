package stacktest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

// EnvStores names the environment variable that spreads the executions
// of every stack Start starts over that many stores (databases of the
// test PostgreSQL); unset, a stack has one. RunOnStores sets it.
const EnvStores = "HARVEST_TEST_STORES"

// Start runs a whole stack for t, stopped when t ends: on a NATS server
// and a database of its own (pgtest.NewDatabase; the test binary's
// TestMain must be pgtest.Main), unless cfg names them, on a loopback
// port, with a state dir in t.TempDir(), a Logger unless cfg has one, and
// an outcome wait of 30 s unless cfg says otherwise. With EnvStores above
// 1 and no cfg.Stores, its executions are spread over that many stores,
// the first its database.
func Start(t testing.TB, cfg devstack.Config) *devstack.Stack {
	t.Helper()
	if cfg.NATSURL == "" {
		cfg.NATSURL = natstest.RunServer(t, natstest.Options{}).ClientURL()
	}
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = pgtest.NewDatabase(t)
	}
	if n := Stores(); n > 1 && len(cfg.Stores) == 0 {
		// The contract on several stores (RunOnStores): the stack's
		// database is the first.
		for i := range n {
			url := cfg.DatabaseURL
			if i > 0 {
				url = pgtest.NewDatabase(t)
			}
			cfg.Stores = append(cfg.Stores, devstack.StoreConfig{Name: fmt.Sprintf("s%d", i), DatabaseURL: url, Mode: placement.Writable})
		}
	}
	cfg.Addr = "127.0.0.1:0"
	cfg.StateDir = t.TempDir()
	if cfg.Logger == nil {
		cfg.Logger = Logger(t)
	}
	if cfg.Ingest.OutcomeWait == 0 {
		// Many stacks share two cores under -race: wait longer than a
		// deployment would before answering 202.
		cfg.Ingest.OutcomeWait = 30 * time.Second
	}
	ctx := natstest.Context(t)
	s, err := devstack.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(ctx))
	})
	return s
}

// Stop stops s within 30 s, failing t if it does not stop cleanly. A
// stack may be stopped twice: Start's cleanup stops it again.
func Stop(t testing.TB, s *devstack.Stack) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, s.Stop(ctx))
}

// Stores is how many stores the stacks of Start have: 1, unless
// EnvStores says more.
func Stores() int {
	n, err := strconv.Atoi(os.Getenv(EnvStores))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// RunOnStores runs the tests named (a package's contract tests) again, in
// a process of their own — the test binary, run again with EnvStores=n —
// and fails t unless each of them passes there. Inside that process, and
// under -short, it skips. A package calls it from its
// TestTheContractHoldsOnTwoStores.
func RunOnStores(t *testing.T, n int, tests []string) {
	t.Helper()
	if Stores() > 1 {
		t.Skip("runs the others")
	}
	if testing.Short() {
		t.Skip("runs the contract tests again")
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^("+strings.Join(tests, "|")+")$", "-test.count=1", "-test.timeout=10m", "-test.v")
	cmd.Env = append(os.Environ(), EnvStores+"="+strconv.Itoa(n))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the contract tests on %d stores:\n%s", n, out)
	for _, name := range tests {
		require.Contains(t, string(out), "--- PASS: "+name+" ", "%s did not pass on %d stores", name, n)
	}
}
