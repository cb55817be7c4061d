package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/store"
)

// Local is a stack running in this process, with what only an in-process
// stack lets the bench measure: the SQL its pool sends, the messages its
// streams store, its activity runs, and its CPU and memory.
type Local struct {
	// Stack is the running stack.
	Stack *devstack.Stack
	sql   *SQLCounter
	// db is the bench's own pool on the stack's database, not traced, so
	// the bench's reads are not counted as the stack's cost.
	db *pgxpool.Pool
	// others are its pools on the stack's other stores, if it has some.
	others []*pgxpool.Pool
	nc     *nats.Conn
	js     jetstream.JetStream
	// pgPID is the private PostgreSQL's postmaster, 0 when the stack uses
	// a server of its own.
	pgPID int
}

// StartLocal starts a stack with cfg, installing a SQLCounter as its
// DBTracer (cfg.DBTracer must be unset).
func StartLocal(ctx context.Context, cfg devstack.Config) (_ *Local, err error) {
	if cfg.DBTracer != nil {
		return nil, errors.New("bench: StartLocal installs its own DBTracer; leave devstack.Config.DBTracer unset")
	}
	l := &Local{sql: &SQLCounter{}}
	cfg.DBTracer = l.sql
	private := cfg.DatabaseURL == ""
	if l.Stack, err = devstack.Start(ctx, cfg); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = l.Stop(context.WithoutCancel(ctx))
		}
	}()
	if l.db, err = store.NewPool(ctx, l.Stack.DB.Config().ConnString()); err != nil {
		return nil, fmt.Errorf("bench: connect to the stack's database: %w", err)
	}
	for _, db := range l.Stack.Pools[min(1, len(l.Stack.Pools)):] {
		other, err := store.NewPool(ctx, db.Config().ConnString())
		if err != nil {
			return nil, fmt.Errorf("bench: connect to the stack's stores: %w", err)
		}
		l.others = append(l.others, other)
	}
	if l.nc, err = nats.Connect(l.Stack.NATSURL(), nats.Name("harvest-bench")); err != nil {
		return nil, fmt.Errorf("bench: connect to the stack's nats: %w", err)
	}
	if l.js, err = jetstream.New(l.nc); err != nil {
		return nil, fmt.Errorf("bench: jetstream: %w", err)
	}
	if private {
		l.pgPID = childPostgres()
	}
	return l, nil
}

// URL is the stack's HTTP API.
func (l *Local) URL() string { return l.Stack.URL() }

// SQL is the counter traced on the stack's pool.
func (l *Local) SQL() *SQLCounter { return l.sql }

// Stop stops the stack. Safe to call twice.
func (l *Local) Stop(ctx context.Context) error {
	if l.db != nil {
		l.db.Close()
		l.db = nil
	}
	for _, db := range l.others {
		db.Close()
	}
	l.others = nil
	if l.nc != nil {
		l.nc.Close()
		l.nc = nil
	}
	if l.Stack == nil {
		return nil
	}
	err := l.Stack.Stop(ctx)
	l.Stack = nil
	return err
}

// dbs are the bench's pools on every store of the stack.
func (l *Local) dbs() []*pgxpool.Pool { return append([]*pgxpool.Pool{l.db}, l.others...) }
