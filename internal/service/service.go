package service

import (
	"context"
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

	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/streams"
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

// ConnectNATS connects to url, retrying until it answers, and declares the
// topology.
func ConnectNATS(ctx context.Context, cfg config.Config, name string, log *slog.Logger) (*nats.Conn, *streams.Topology, error) {
	if cfg.NATSURL == "" {
		return nil, nil, fmt.Errorf("no NATS server: set nats_url in the config file or HARVEST_NATS_URL")
	}
	nc, err := backoff.Retry(ctx, func() (*nats.Conn, error) {
		nc, err := nats.Connect(cfg.NATSURL, streams.ClientOptions(name, log)...)
		if err != nil {
			log.Info("waiting for NATS", "url", cfg.NATSURL, "err", err)
		}
		return nc, err
	}, backoff.WithBackOff(backoff.NewExponentialBackOff()), backoff.WithMaxElapsedTime(connectTimeout))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS %s: %w", cfg.NATSURL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	top, err := backoff.Retry(ctx, func() (*streams.Topology, error) {
		return streams.Declare(ctx, js, StreamsConfig(cfg))
	}, backoff.WithBackOff(backoff.NewExponentialBackOff()), backoff.WithMaxElapsedTime(connectTimeout))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, top, nil
}

// ConnectDB connects to PostgreSQL, retrying until it answers.
func ConnectDB(ctx context.Context, cfg config.Config, log *slog.Logger) (*pgxpool.Pool, error) {
	if cfg.DatabaseURL == "" {
		return nil, fmt.Errorf("no PostgreSQL: set database_url in the config file or HARVEST_DATABASE_URL")
	}
	db, err := store.NewPool(ctx, cfg.DatabaseURL)
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
