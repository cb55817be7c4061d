package devstack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harvest-engine/harvest/internal/dev/pglocal"
	"github.com/harvest-engine/harvest/internal/store"
)

func (s *Stack) startPostgres(ctx context.Context) error {
	url := s.cfg.DatabaseURL
	if url == "" {
		dataDir, err := filepath.Abs(filepath.Join(s.cfg.StateDir, "postgres"))
		if err != nil {
			return fmt.Errorf("postgres data dir: %w", err)
		}
		if err := s.adoptTempDirPostgres(dataDir); err != nil {
			return err
		}
		// As root, PostgreSQL runs as an unprivileged user and reaches
		// its data dir by descriptor (internal/dev/pglocal), so the data stays
		// in the state dir even under /root. It listens on 127.0.0.1,
		// where every local user reaches it: it requires the state dir's
		// password of every connection, and pglocal sets it at each start
		// (on a cluster from before there were credentials too).
		pg, err := pglocal.Start(ctx, pglocal.Config{DataDir: dataDir, Durable: true, Password: s.creds.PostgresPassword,
			Logger: s.log.With("service", "postgres")})
		if err != nil {
			if errors.Is(err, pglocal.ErrDataDirUnreachable) {
				return fmt.Errorf("start private postgres: %w; or set HARVEST_DATABASE_URL to a server of your own", err)
			}
			return fmt.Errorf("start private postgres: %w", err)
		}
		s.pg = pg
		if err := createDatabase(ctx, pg.URL("postgres"), "harvest"); err != nil {
			return err
		}
		url = pg.URL("harvest")
	}
	pcfg, err := store.PoolConfigWith(url, store.PoolOptions{MaxConns: s.cfg.DatabaseMaxConns})
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	pcfg.ConnConfig.Tracer = s.cfg.DBTracer
	db, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	if err := db.Ping(ctx); err != nil {
		db.Close()
		return fmt.Errorf("connect to postgres: %w", err)
	}
	s.DB = db
	return nil
}

// adoptTempDirPostgres moves into the state dir the PostgreSQL data that
// harvest dev kept, as root, in the temp dir when the PostgreSQL user could
// not reach the state dir (os.TempDir()/harvest-dev-<hash of dataDir>, up to
// issue 19), so that a stack made then keeps its executions.
func (s *Stack) adoptTempDirPostgres(dataDir string) error {
	sum := sha256.Sum256([]byte(dataDir))
	old := filepath.Join(os.TempDir(), "harvest-dev-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(filepath.Join(old, "postgres", "PG_VERSION")); err != nil {
		return nil
	}
	if _, err := os.Lstat(dataDir); err == nil {
		s.log.Warn("the state dir has PostgreSQL data of its own; the data an older harvest dev kept for it in the temp dir is left alone",
			"data_dir", dataDir, "old_data_dir", filepath.Join(old, "postgres"))
		return nil
	}
	if err := os.Rename(filepath.Join(old, "postgres"), dataDir); err != nil {
		return fmt.Errorf("move this state dir's PostgreSQL data from %s, where an older harvest dev kept it, to %s: %w; "+
			"move it yourself, or remove it to start afresh", filepath.Join(old, "postgres"), dataDir, err)
	}
	s.log.Info("moved the PostgreSQL data an older harvest dev kept in the temp dir into the state dir",
		"data_dir", dataDir, "old_data_dir", filepath.Join(old, "postgres"))
	if err := os.RemoveAll(old); err != nil {
		s.log.Warn("remove the old PostgreSQL folder", "dir", old, "err", err)
	}
	return nil
}

func createDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", name, err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("create database %s: %w", name, err)
		}
	}
	return nil
}
