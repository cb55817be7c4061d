package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// TestAShardMarkDoesNotOutliveAKilledScheduler: a scheduler process whose
// shards are failing is SIGKILLed and the failure ends while no
// scheduler runs. Ingest stays in service throughout (200), says the
// shards fail while the scheduler holds them, then that no scheduler
// holds them (its marks, which nobody refreshes, no longer count), and
// ready once another scheduler applies them, with no mark left behind.
func TestAShardMarkDoesNotOutliveAKilledScheduler(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills real processes")
	}
	bins := buildServices(t)
	ns := natstest.RunServer(t, natstest.Options{})
	dbURL := pgtest.NewDatabase(t)
	ctx := natstest.Context(t)
	env := []string{
		"HARVEST_NATS_URL=" + ns.ClientURL(),
		"HARVEST_DATABASE_URL=" + dbURL,
		"HARVEST_SHARDS=4",
		"HARVEST_LEASE_TTL=1s",
		"HARVEST_LOG_LEVEL=debug",
	}
	logs := t.TempDir()
	scheduler := func(name string) *proc {
		return &proc{t: t, name: name, bin: filepath.Join(bins, "scheduler"), env: env, log: filepath.Join(logs, name)}
	}
	a := scheduler("scheduler-a")
	a.start()

	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 4})
	require.NoError(t, err)
	db, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	api, err := ingest.New(ingest.Config{Topology: top, NC: nc, DB: db, ShardFailingAfter: 500 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, api.Start(ctx))
	t.Cleanup(func() { _ = api.Stop(context.Background()) })
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	ready := func() (int, client.ReadinessResponse) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		var body client.ReadinessResponse
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, body
	}
	// waitReady waits until every shard is reported with cause, or none
	// when cause is empty; ingest answers 200 all along.
	waitReady := func(what, cause string) {
		t.Helper()
		probe.Until(t, 30*time.Second, what, func() bool {
			status, body := ready()
			require.Equal(t, http.StatusOK, status, "ingest stays in service: %+v", body)
			if cause == "" {
				return body.Status == client.ReadyStatusReady && len(body.FailingShards) == 0
			}
			if body.Status != client.ReadyStatusDegraded || len(body.FailingShards) != 4 {
				return false
			}
			for _, f := range body.FailingShards {
				if f.Cause != cause {
					return false
				}
			}
			return true
		})
	}
	exec := func(sql string) {
		t.Helper()
		_, err := db.Exec(ctx, sql)
		require.NoError(t, err)
	}
	waitReady("the scheduler to apply every shard", "")

	// Every shard's session fails as it starts, as a deploy gone wrong
	// would leave them: a table it reads is missing, and the running
	// sessions end (their consumers are deleted under them).
	exec(`ALTER TABLE outbox RENAME TO outbox_away`)
	for shard := range 4 {
		if err := js.DeleteConsumer(ctx, broker.CommandStream, fmt.Sprintf("harvest_sched_%d", shard)); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			require.NoError(t, err)
		}
	}
	waitReady("the shards to be reported failing", "failing")

	a.kill()
	exec(`ALTER TABLE outbox_away RENAME TO outbox`)
	waitReady("the shards to be reported unowned, the dead scheduler's marks no longer counting", "unowned")
	var marks int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM shard_offsets WHERE failing_since IS NOT NULL`).Scan(&marks))
	require.Equal(t, 4, marks, "the killed scheduler's marks are still there, and do not count")

	scheduler("scheduler-b").start()
	waitReady("ingest to be ready once a scheduler applies the shards again", "")
	probe.Until(t, 30*time.Second, "the new owner to remove the dead one's marks", func() bool {
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM shard_offsets WHERE failing_since IS NOT NULL`).Scan(&marks))
		return marks == 0
	})
	status, body := ready()
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, client.ReadyStatusReady, body.Status)
}
