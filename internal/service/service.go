package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/store"
)

// stopTimeout bounds how long a service takes to stop once asked.
const stopTimeout = 30 * time.Second

// connectTimeout bounds how long a service waits for NATS or PostgreSQL
// at start-up.
const connectTimeout = 2 * time.Minute

// SignalContext is cancelled on SIGINT or SIGTERM.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// ConnectNATS connects to NATS (DialNATS) and declares the topology with
// nats_replicas. Replicas a server that is not clustered cannot place, and
// a shard count other than the deployment's, fail at once; a cluster that
// cannot place the replicas is waited for (its servers may still be
// joining) as long as NATS is.
func ConnectNATS(ctx context.Context, cfg config.Config, name string, log *slog.Logger) (*nats.Conn, *broker.Topology, error) {
	nc, err := DialNATS(ctx, cfg, name, log)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	dctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	top, err := broker.DeclareRetrying(dctx, js, StreamsConfig(cfg), func(err error) {
		log.Warn("waiting to declare the streams", "err", err)
	})
	if err != nil {
		nc.Close()
		if errors.Is(err, broker.ErrReplicasUnplaceable) {
			err = fmt.Errorf("config: nats_replicas %d: %w", cfg.NATSReplicas, err)
		}
		return nil, nil, err
	}
	return nc, top, nil
}

// DialNATS connects to the server pool nats_url names, with the
// configuration's credentials and TLS (NATSOptions), retrying until a
// server answers. A server that refuses the credentials or the TLS
// handshake fails it at once.
func DialNATS(ctx context.Context, cfg config.Config, name string, log *slog.Logger) (*nats.Conn, error) {
	if cfg.NATSURL == "" {
		return nil, fmt.Errorf("no NATS server: set nats_url in the config file or HARVEST_NATS_URL")
	}
	opts, err := NATSOptions(cfg)
	if err != nil {
		return nil, err
	}
	opts = append(opts, broker.ClientOptions(name, log)...)
	servers := redactedURLs(cfg.NATSURL)
	nc, err := backoff.Retry(ctx, func() (*nats.Conn, error) {
		nc, err := nats.Connect(cfg.NATSURL, opts...)
		if err != nil {
			if check := refusedByNATS(err); check != "" {
				return nil, backoff.Permanent(fmt.Errorf("refused (check %s): %w", check, err))
			}
			log.Info("waiting for NATS", "url", servers, "err", err)
		}
		return nc, err
	}, backoff.WithBackOff(backoff.NewExponentialBackOff()), backoff.WithMaxElapsedTime(connectTimeout))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", servers, err)
	}
	return nc, nil
}

// ConnectStores connects to every store of the configuration, in their
// order (database_url's alone, with none), retrying each until it answers.
func ConnectStores(ctx context.Context, cfg config.Config, log *slog.Logger) ([]*pgxpool.Pool, error) {
	var pools []*pgxpool.Pool
	for i, url := range cfg.StoreURLs() {
		if url == "" {
			return nil, fmt.Errorf("no PostgreSQL: set database_url in the config file or HARVEST_DATABASE_URL")
		}
		db, err := connectDB(ctx, cfg, url, log)
		if err != nil {
			for _, p := range pools {
				p.Close()
			}
			if len(cfg.Stores) > 0 {
				err = fmt.Errorf("store %s: %w", cfg.Stores[i].Name, err)
			}
			return nil, err
		}
		pools = append(pools, db)
	}
	return pools, nil
}

func connectDB(ctx context.Context, cfg config.Config, url string, log *slog.Logger) (*pgxpool.Pool, error) {
	db, err := store.NewPoolWith(ctx, url, PoolOptions(cfg))
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	_, err = backoff.Retry(ctx, func() (struct{}, error) {
		err := db.Ping(ctx)
		if err != nil {
			log.Info("waiting for PostgreSQL", "err", err)
		}
		return struct{}{}, err
	}, backoff.WithBackOff(backoff.NewExponentialBackOff()), backoff.WithMaxElapsedTime(connectTimeout))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	return db, nil
}
