package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/harvest-engine/harvest/internal/dev/dirlock"
	"github.com/harvest-engine/harvest/internal/dev/pglocal"
	"github.com/harvest-engine/harvest/internal/store"
)

// EnvDatabaseURL names the environment variable that points pgtest at an
// existing server instead of starting one. It must be a postgres:// URL of a
// database on a server where its user may CREATE DATABASE; pgtest creates
// (and drops) its databases next to it.
const EnvDatabaseURL = "HARVEST_TEST_DATABASE_URL"

// EnvLog names the environment variable that, when non-empty, sends the
// private server's output to stderr.
const EnvLog = "HARVEST_TEST_PG_LOG"

const (
	setupTimeout = 2 * time.Minute
	opTimeout    = time.Minute
)

var (
	mainCalled atomic.Bool

	setupOnce sync.Once
	env       *harness
	setupErr  error

	// createMu serialises CREATE DATABASE ... TEMPLATE: PostgreSQL refuses
	// to copy a template that another session, including a concurrent
	// CREATE DATABASE from it, is connected to.
	createMu sync.Mutex
)

// harness is the per-process server and template.
type harness struct {
	srv      *pglocal.Server // nil when EnvDatabaseURL is used
	tmpDir   string          // holds srv's data dir
	lock     *dirlock.Lock   // on tmpDir, while srv runs
	external *url.URL        // EnvDatabaseURL, parsed
	admin    *pgxpool.Pool   // for CREATE/DROP DATABASE
	template string          // migrated template database
}

// Main runs the package's tests and exits: it runs m.Run(), then stops the
// server (if one was started) and removes its directory, then, if the tests
// passed, fails the run when goroutines leaked (goleak.Find with opts; pass
// goleak.IgnoreTopFunction and the like for goroutines known to linger).
// The server itself starts lazily, on the first NewDatabase, NewPool or URL.
func Main(m *testing.M, opts ...goleak.Option) {
	mainCalled.Store(true)
	code := m.Run()
	if err := teardown(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// NewDatabase creates a fresh database with the Harvest schema migrated,
// drops it when the test ends, and returns its URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	h := ensure(t)
	name := "harvest_test_" + randomSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	createMu.Lock()
	_, err := h.admin.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(h.template))
	createMu.Unlock()
	if err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := dropDatabase(ctx, h.admin, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return h.url(name)
}

// NewPool is NewDatabase plus a pool connected to it, closed when the test
// ends (before the database is dropped).
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dsn := NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	// The pool Harvest's services run with, so that tests plan as they do.
	pool, err := store.NewPool(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// URL returns the URL of database dbname on the test server, starting the
// server if needed. The database need not exist.
func URL(t testing.TB, dbname string) string {
	t.Helper()
	return ensure(t).url(dbname)
}

// ensure returns the harness, setting it up on first use; it fails t when
// that is impossible.
func ensure(t testing.TB) *harness {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatal("pgtest: the test package's TestMain must call pgtest.Main(m), which stops the server when the tests end")
	}
	setupOnce.Do(func() { env, setupErr = setup() })
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return env
}

func setup() (*harness, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	h := &harness{}
	if err := h.init(ctx); err != nil {
		if cerr := h.close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("pgtest: clean up: %w", cerr))
		}
		return nil, err
	}
	return h, nil
}

// init starts or connects to the server and migrates the template. On
// error, h holds what needs closing.
func (h *harness) init(ctx context.Context) error {
	var err error
	var adminURL string
	if raw := os.Getenv(EnvDatabaseURL); raw != "" {
		u, perr := url.Parse(raw)
		if perr != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return fmt.Errorf("pgtest: %s must be a postgres:// URL", EnvDatabaseURL)
		}
		h.external, adminURL = u, raw
	} else {
		removeStale()
		if h.tmpDir, err = os.MkdirTemp("", tmpPrefix+"*"); err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
		// Held until close: a process that dies without closing leaves the
		// directory to the next one's removeStale.
		if h.lock, err = dirlock.Acquire(h.tmpDir, lockFile); err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
		// A password of its own, in the URLs NewDatabase returns: the
		// server listens on 127.0.0.1, where every local user reaches it.
		h.srv, err = pglocal.Start(ctx, pglocal.Config{
			DataDir:  filepath.Join(h.tmpDir, "data"),
			Password: randomSuffix() + randomSuffix(),
			Logger:   logger(),
		})
		if err != nil {
			return fmt.Errorf("pgtest: start PostgreSQL: %w", err)
		}
		adminURL = h.srv.URL("postgres")
	}

	cfg, err := pgxpool.ParseConfig(adminURL)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	cfg.MaxConns = 4
	if h.admin, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return fmt.Errorf("pgtest: connect: %w", err)
	}

	name := fmt.Sprintf("harvest_template_%d_%s", os.Getpid(), randomSuffix())
	if _, err := h.admin.Exec(ctx, "CREATE DATABASE "+ident(name)); err != nil {
		return fmt.Errorf("pgtest: create template database: %w", err)
	}
	h.template = name
	pool, err := pgxpool.New(ctx, h.url(name))
	if err != nil {
		return fmt.Errorf("pgtest: connect to template: %w", err)
	}
	_, err = store.Migrate(ctx, pool)
	// Close waits until every connection is closed, so none holds on to
	// the template when tests copy it.
	pool.Close()
	if err != nil {
		return fmt.Errorf("pgtest: migrate template: %w", err)
	}
	return nil
}

// teardown undoes setup, if it ran.
func teardown() error {
	setupOnce.Do(func() {}) // no setup from here on
	if env == nil {
		return nil
	}
	return env.close()
}

// close drops the template (it would outlive us on an external server),
// stops the server and removes its directory.
func (h *harness) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var errs []error
	if h.admin != nil {
		if h.template != "" {
			if err := dropDatabase(ctx, h.admin, h.template); err != nil {
				errs = append(errs, err)
			}
		}
		h.admin.Close()
	}
	if h.srv != nil {
		if err := h.srv.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop PostgreSQL: %w", err))
		}
	}
	if h.tmpDir != "" {
		if err := os.RemoveAll(h.tmpDir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := h.lock.Release(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// The temporary directory of a private server: os.TempDir()/harvest-pgtest-*,
// holding the lock file while its process runs.
const (
	tmpPrefix = "harvest-pgtest-"
	lockFile  = "lock"
	// staleAfter keeps removeStale off a directory whose process has just
	// created its lock file and not locked it yet.
	staleAfter = time.Minute
)

// removeStale removes the directories of private servers whose test
// process ended without removing its own (killed, or timed out): their
// lock file is held by no one. A directory without a lock file is left
// alone: it may belong to an older pgtest that is still running.
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tmpPrefix+"*"))
	for _, dir := range dirs {
		if dirlock.Stale(dir, lockFile, staleAfter) {
			_ = os.RemoveAll(dir)
		}
	}
}

// url returns the URL of dbname on the harness's server.
func (h *harness) url(dbname string) string {
	if h.srv != nil {
		return h.srv.URL(dbname)
	}
	u := *h.external
	u.Path, u.RawPath = "/"+dbname, ""
	return u.String()
}

func dropDatabase(ctx context.Context, admin *pgxpool.Pool, name string) error {
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// randomSuffix returns 16 lower-case hex digits.
func randomSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails, per crypto/rand
	return hex.EncodeToString(b[:])
}

func logger() *slog.Logger {
	if os.Getenv(EnvLog) == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
