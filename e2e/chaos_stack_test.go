//go:build linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/examples/fakepay"
)

// The chaos stack is the production shape as OS processes: NATS (a
// nats-server built from the module Harvest depends on) with JetStream on
// files, PostgreSQL (pglocal), two ingests, two schedulers and two workers,
// all on fixed loopback ports and state directories so that each can be
// stopped and started again where it was. The payment provider is served
// by the test process and is not a fault target: it is the witness of
// every effect.

const (
	// chaosShards is the services' default shard count.
	chaosShards = 16
	// restartDelay is how long the stack, like a process supervisor, waits
	// before starting again a process that exited on its own.
	restartDelay = time.Second
)

// chargeLog records every charge the provider makes, in order, and when
// (at, by index).
type chargeLog struct {
	mu      sync.Mutex
	charges []fakepay.Charge
	at      []time.Time
}

func (l *chargeLog) add(c fakepay.Charge) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.charges = append(l.charges, c)
	l.at = append(l.at, time.Now())
}

// byCustomer returns the charges of every customer that starts with prefix.
func (l *chargeLog) byCustomer(prefix string) map[string][]fakepay.Charge {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]fakepay.Charge{}
	for _, c := range l.charges {
		if strings.HasPrefix(c.CustomerID, prefix) {
			out[c.CustomerID] = append(out[c.CustomerID], c)
		}
	}
	return out
}

// stackConfig is what a stack is built from.
type stackConfig struct {
	bins     string // nats-server, ingest, scheduler, worker
	logDir   string // empty: inside the stack's directory, removed with it
	leaseTTL time.Duration
	ackWait  time.Duration
	logLevel string
	// natsNodes is 1 (one NATS server, nats_replicas 1) or the size of a
	// NATS cluster whose streams and buckets have a replica on each node.
	natsNodes int
	// stores is 1 (database_url) or the number of PostgreSQL stores the
	// executions are spread over, each a database of the one PostgreSQL
	// server (so a postgres fault hits them all).
	stores int
}

// stack is one running deployment.
type stack struct {
	dir      string
	pg       *pgMember
	nats     []*chaosProc // one per NATS node
	ingests  []*chaosProc
	scheds   []*chaosProc
	workers  []*chaosProc
	charges  *chargeLog
	provider *fakepay.Provider
	payments *httptest.Server
	baseURLs []string // the ingests'
	db       *pgxpool.Pool
	// dbs are the stores' pools, db the first.
	dbs    []*pgxpool.Pool
	nc     *nats.Conn
	js     jetstream.JetStream
	tap    *tap
	client *http.Client
}

// newStack starts a stack and waits until it serves. On error, whatever
// started is stopped.
func newStack(ctx context.Context, cfg stackConfig) (s *stack, err error) {
	dir, err := os.MkdirTemp("", "harvest-chaos-")
	if err != nil {
		return nil, fmt.Errorf("stack dir: %w", err)
	}
	// PostgreSQL runs as another user when we are root.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("stack dir: %w", err)
	}
	s = &stack{dir: dir, charges: &chargeLog{}}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	logDir := filepath.Join(dir, "logs")
	if cfg.logDir != "" {
		logDir = cfg.logDir
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("log dir: %w", err)
	}
	nodes := max(cfg.natsNodes, 1)
	// PostgreSQL, two ingests, and a client and a route port per NATS node,
	// then the admin addresses of the two schedulers and two workers.
	ports, err := freePorts(3 + 2*nodes + 4)
	if err != nil {
		return nil, err
	}
	adminPorts := ports[3+2*nodes:]
	s.pg = &pgMember{dataDir: filepath.Join(dir, "pg"), port: ports[0], log: &runLogs{dir: logDir, name: "postgres"}}
	if err := s.pg.start(ctx); err != nil {
		return nil, err
	}
	natsPorts, routePorts := ports[3:3+nodes], ports[3+nodes:3+2*nodes]
	var urls, routes []string
	for i := range nodes {
		urls = append(urls, "nats://127.0.0.1:"+strconv.Itoa(natsPorts[i]))
		routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(routePorts[i]))
	}
	natsURL := strings.Join(urls, ",")
	for i := range nodes {
		id := "nats"
		if nodes > 1 {
			id = fmt.Sprintf("nats-%d", i)
		}
		args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(natsPorts[i]), "-js", "-sd", filepath.Join(dir, id)}
		if nodes > 1 {
			// Each node names every route, its own included (a server
			// ignores a route to itself), so they find one another in any
			// order of (re)starts.
			args = append(args, "-n", id, "--cluster_name", "harvest-chaos", "--cluster", routes[i], "--routes", strings.Join(routes, ","))
		}
		s.nats = append(s.nats, &chaosProc{id: id, bin: filepath.Join(cfg.bins, "nats-server"), args: args, env: devEnv(),
			readyLine: "Server is ready", log: &runLogs{dir: logDir, name: id}})
	}
	for _, n := range s.nats {
		if err := n.start(ctx); err != nil {
			return nil, err
		}
	}
	for _, n := range s.nats {
		if err := n.waitReady(ctx); err != nil {
			return nil, err
		}
	}

	s.provider = fakepay.New()
	s.provider.AfterCharge = func(c fakepay.Charge) {
		s.charges.add(c)
		// A provider that takes its time, so that faults land mid-charge.
		time.Sleep(*chaosChargeLatency) // the provider's latency, not synchronisation
	}
	s.payments = httptest.NewServer(fakepay.NewHandler(s.provider))
	dbURL := s.pg.srvURL()
	storeURLs, err := s.pg.storeURLs(ctx, max(cfg.stores, 1))
	if err != nil {
		return nil, err
	}
	declared, err := writeDeclaredConfigWith(dir, chaosDeclared())
	if err != nil {
		return nil, err
	}
	dbEnv := "HARVEST_DATABASE_URL=" + dbURL
	if cfg.stores > 1 {
		// The stores, in the configuration: database_url stays unset.
		f, err := os.OpenFile(declared, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		_, err = fmt.Fprint(f, "stores:\n")
		for i, u := range storeURLs {
			if err == nil {
				_, err = fmt.Fprintf(f, "  - {name: s%d, database_url: %q}\n", i, u)
			}
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("stores config: %w", err)
		}
		dbEnv = ""
	}
	env := devEnv(
		"HARVEST_CONFIG="+declared,
		"HARVEST_NATS_URL="+natsURL,
		"HARVEST_LEASE_TTL="+cfg.leaseTTL.String(),
		"HARVEST_TASK_ACK_WAIT="+cfg.ackWait.String(),
		"HARVEST_FAKEPAY_URL="+s.payments.URL,
		"HARVEST_LOG_LEVEL="+cfg.logLevel,
		"HARVEST_NATS_REPLICAS="+strconv.Itoa(nodes),
	)
	if dbEnv != "" {
		env = append(env, dbEnv)
	}
	service := func(kind string, i int, readyLine string, extra ...string) *chaosProc {
		id := fmt.Sprintf("%s-%d", kind, i)
		return &chaosProc{id: id, bin: filepath.Join(cfg.bins, kind), env: append(append([]string(nil), env...), extra...),
			readyLine: readyLine, log: &runLogs{dir: logDir, name: id}}
	}
	for i := range 2 {
		addr := "127.0.0.1:" + strconv.Itoa(ports[1+i])
		s.baseURLs = append(s.baseURLs, "http://"+addr)
		in := service("ingest", i, "ingest ready", "HARVEST_HTTP_ADDR="+addr)
		in.readyURL = "http://" + addr + "/readyz"
		s.ingests = append(s.ingests, in)
		schedAdmin := "127.0.0.1:" + strconv.Itoa(adminPorts[i])
		sched := service("scheduler", i, "scheduler ready", "HARVEST_ADMIN_ADDR="+schedAdmin)
		sched.readyURL = "http://" + schedAdmin + "/readyz"
		s.scheds = append(s.scheds, sched)
		workerAdmin := "127.0.0.1:" + strconv.Itoa(adminPorts[2+i])
		w := service("worker", i, "worker ready", "HARVEST_ADMIN_ADDR="+workerAdmin)
		if i == 1 {
			// A fleet of different workers: the second registers some of
			// the examples (testdata/fleetworker), so that charge, collect,
			// sleep, digest and fanout run only on the first, onboarding
			// and its activities, charge_card and square on both.
			w.bin = filepath.Join(cfg.bins, "fleetworker")
			w.env = append(w.env, "FLEET_NAMES="+strings.Join(chaosSecondWorker, ","))
		}
		w.readyURL = "http://" + workerAdmin + "/readyz"
		s.workers = append(s.workers, w)
	}
	// The schedulers first: they migrate the schema.
	for _, m := range append(append(append([]*chaosProc(nil), s.scheds...), s.ingests...), s.workers...) {
		if err := m.start(ctx); err != nil {
			return nil, err
		}
	}
	for _, u := range storeURLs {
		db, err := pgxpool.New(ctx, u)
		if err != nil {
			return nil, fmt.Errorf("harness pool: %w", err)
		}
		s.dbs = append(s.dbs, db)
	}
	s.db = s.dbs[0]
	if s.nc, err = nats.Connect(natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond)); err != nil {
		return nil, fmt.Errorf("harness NATS connection: %w", err)
	}
	if s.js, err = jetstream.New(s.nc); err != nil {
		return nil, fmt.Errorf("harness JetStream: %w", err)
	}
	if s.tap, err = startTap(s.nc, *chaosTapDeliveries); err != nil {
		return nil, err
	}
	s.client = &http.Client{
		Timeout:   15 * time.Second, // past ingest's publish timeout and outcome wait
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext},
	}
	return s, nil
}

func (p *pgMember) srvURL() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.srv.URL("postgres")
}

// storeURLs are the URLs of n stores on the server: its postgres
// database, and databases store1 ... created for the others.
func (p *pgMember) storeURLs(ctx context.Context, n int) ([]string, error) {
	urls := []string{p.srvURL()}
	if n < 2 {
		return urls, nil
	}
	conn, err := pgx.Connect(ctx, urls[0])
	if err != nil {
		return nil, fmt.Errorf("stores: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for i := 1; i < n; i++ {
		name := fmt.Sprintf("store%d", i)
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			return nil, fmt.Errorf("stores: create %s: %w", name, err)
		}
		p.mu.Lock()
		urls = append(urls, p.srv.URL(name))
		p.mu.Unlock()
	}
	return urls, nil
}

// countAll runs a query of one count in every store and adds up the
// counts.
func (s *stack) countAll(ctx context.Context, sql string, args ...any) (int, error) {
	total := 0
	for _, db := range s.dbs {
		var n int
		if err := db.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// dbCount runs a count query in store i.
func (s *stack) dbCount(ctx context.Context, i int, sql string, args ...any) (int, error) {
	var n int
	err := s.dbs[i].QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

// queryAll runs a query in every store and calls each for each row.
func (s *stack) queryAll(ctx context.Context, sql string, args []any, each func(pgx.Rows) error) error {
	for _, db := range s.dbs {
		rows, err := db.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			if err := each(rows); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

// outcomeOf reads a command's stored outcome in whichever store has it;
// nil when none has.
func (s *stack) outcomeOf(ctx context.Context, commandID string) ([]byte, error) {
	for _, db := range s.dbs {
		var raw []byte
		err := db.QueryRow(ctx, `SELECT outcome::text FROM command_outcomes WHERE command_id = $1`, commandID).Scan(&raw)
		if err == nil {
			return raw, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
	}
	return nil, nil
}

// members returns the fault targets of a role.
func (s *stack) members(role string) []member {
	var out []member
	switch role {
	case "ingest":
		for _, m := range s.ingests {
			out = append(out, m)
		}
	case "scheduler":
		for _, m := range s.scheds {
			out = append(out, m)
		}
	case "worker":
		for _, m := range s.workers {
			out = append(out, m)
		}
	case "nats":
		for _, m := range s.nats {
			out = append(out, m)
		}
	case "postgres":
		out = append(out, s.pg)
	}
	return out
}

// all returns every member.
func (s *stack) all() []member {
	var out []member
	for _, role := range []string{"postgres", "nats", "scheduler", "ingest", "worker"} {
		out = append(out, s.members(role)...)
	}
	return out
}

// crashes collects the exits no fault caused since the last call.
func (s *stack) crashes() []crash {
	var out []crash
	for _, m := range s.all() {
		out = append(out, m.crashes()...)
	}
	return out
}

// close stops everything and removes the stack's directory.
func (s *stack) close() {
	if s.client != nil {
		s.client.CloseIdleConnections()
	}
	if s.tap != nil {
		s.tap.stop()
	}
	if s.nc != nil {
		s.nc.Close()
	}
	for _, db := range s.dbs {
		db.Close()
	}
	for _, group := range [][]*chaosProc{s.workers, s.ingests, s.scheds} {
		for _, p := range group {
			p.close()
		}
	}
	for _, n := range s.nats {
		n.close()
	}
	if s.pg != nil {
		s.pg.close()
	}
	if s.payments != nil {
		s.payments.Close()
	}
	_ = os.RemoveAll(s.dir)
}

// waitHealthy waits until every member is up and ready, both schedulers
// hold a share of the shards, and a start through each ingest completes.
func (s *stack) waitHealthy(ctx context.Context, canaryKey string) error {
	for _, m := range s.all() {
		if err := m.waitReady(ctx); err != nil {
			return err
		}
	}
	var owners, held int
	err := pollUntil(ctx, 50*time.Millisecond, func() bool {
		// Each store's shards are shared by both schedulers.
		shared := true
		owners, held = 0, 0
		for _, db := range s.dbs {
			var o, h int
			err := db.QueryRow(ctx, `SELECT count(DISTINCT owner), count(*) FROM shard_leases WHERE owner IS NOT NULL AND expires_at > now()`).Scan(&o, &h)
			shared = shared && err == nil && o == 2 && h == chaosShards
			owners, held = owners+o, held+h
		}
		return shared
	})
	if err != nil {
		return fmt.Errorf("shards not shared by both schedulers (%d owners hold %d of %d, across %d store(s)): %w", owners, held, chaosShards*len(s.dbs), len(s.dbs), err)
	}
	for i := range s.baseURLs {
		key := fmt.Sprintf("%s-%d", canaryKey, i)
		a := s.sendRetrying(ctx, i, key, chargeBody(100, "canary_"+key), time.Now().Add(30*time.Second), func(answer) {})
		if !a.ok() {
			return fmt.Errorf("canary start %s through ingest-%d: %s", key, i, a)
		}
	}
	var done int
	err = pollUntil(ctx, 50*time.Millisecond, func() bool {
		var err error
		done, err = s.countAll(ctx, `SELECT count(*) FROM executions WHERE starts_with(idempotency_key, $1) AND status = 'Completed'`, canaryKey+"-")
		return err == nil && done == len(s.baseURLs)
	})
	if err != nil {
		return fmt.Errorf("canary starts did not complete (%d of %d): %w", done, len(s.baseURLs), err)
	}
	return nil
}

// pollUntil calls cond every interval until it holds or ctx ends.
func pollUntil(ctx context.Context, interval time.Duration, cond func() bool) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

func freePorts(n int) ([]int, error) {
	var out []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// chaosSecondWorker are the names the chaos stack's second worker
// registers; the first registers every example.
var chaosSecondWorker = []string{examples.WorkflowOnboarding, examples.ActivityCreateDBUser, examples.ActivitySendWelcome,
	examples.ActivityChargeCard, examples.ActivitySquare, workflowFlaky, workflowChain, workflowSaga, workflowFamily, workflowReset}

// buildChaosBinaries builds nats-server, the three services and the fleet
// worker into dir.
func buildChaosBinaries(dir string) error {
	for _, args := range [][]string{
		{"build", "-o", filepath.Join(dir, "nats-server"), "github.com/nats-io/nats-server/v2"},
		{"build", "-o", dir + string(filepath.Separator),
			"github.com/harvest-engine/harvest/cmd/ingest", "github.com/harvest-engine/harvest/cmd/scheduler", "github.com/harvest-engine/harvest/cmd/worker",
			"./testdata/fleetworker"},
	} {
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}
