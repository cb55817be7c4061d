package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
)

// SQLCounter is a pgx tracer (QueryTracer and BatchTracer) that counts
// what a pool sends to PostgreSQL. Install it as the pool's
// ConnConfig.Tracer (devstack.Config.DBTracer). Safe for concurrent use.
//
// A statement is every Query, QueryRow, Exec and every query of a batch,
// except transaction control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT,
// RELEASE). A transaction is every COMMIT that committed (alone or as the
// last query of a batch), every statement sent outside a transaction
// (autocommit), and every batch sent outside a transaction that does not
// begin one (an implicit one).
type SQLCounter struct {
	statements   atomic.Int64
	transactions atomic.Int64
	rollbacks    atomic.Int64
	batches      atomic.Int64
}

// SQLCounts is a snapshot of a SQLCounter.
type SQLCounts struct {
	Statements   int64
	Transactions int64
	Rollbacks    int64
	Batches      int64
}

// Counts returns the counts so far.
func (c *SQLCounter) Counts() SQLCounts {
	return SQLCounts{
		Statements:   c.statements.Load(),
		Transactions: c.transactions.Load(),
		Rollbacks:    c.rollbacks.Load(),
		Batches:      c.batches.Load(),
	}
}

// Sub is the difference c − o.
func (c SQLCounts) Sub(o SQLCounts) SQLCounts {
	return SQLCounts{
		Statements:   c.Statements - o.Statements,
		Transactions: c.Transactions - o.Transactions,
		Rollbacks:    c.Rollbacks - o.Rollbacks,
		Batches:      c.Batches - o.Batches,
	}
}

// txControl reports whether sql is BEGIN, COMMIT, ROLLBACK, SAVEPOINT,
// RELEASE (or END, ABORT, START TRANSACTION).
func txControl(sql string) bool {
	sql = strings.TrimSpace(sql)
	word := sql
	if i := strings.IndexAny(sql, " \t\r\n;"); i >= 0 {
		word = sql[:i]
	}
	switch strings.ToLower(word) {
	case "begin", "commit", "rollback", "savepoint", "release", "end", "abort", "start":
		return true
	}
	return false
}

// TraceQueryStart counts a statement.
func (c *SQLCounter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if txControl(data.SQL) {
		return ctx
	}
	c.statements.Add(1)
	if conn.PgConn().TxStatus() == 'I' {
		c.transactions.Add(1)
	}
	return ctx
}

// TraceQueryEnd counts a COMMIT that committed, or one that rolled back.
func (c *SQLCounter) TraceQueryEnd(_ context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if data.Err != nil {
		return
	}
	switch {
	case data.CommandTag.String() == "COMMIT":
		c.transactions.Add(1)
	case data.CommandTag.String() == "ROLLBACK":
		c.rollbacks.Add(1)
	}
}

// TraceBatchStart counts a batch, and its implicit transaction when it is
// sent outside one and does not begin one itself.
func (c *SQLCounter) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	c.batches.Add(1)
	if conn.PgConn().TxStatus() == 'I' && !beginsTx(data.Batch) {
		c.transactions.Add(1)
	}
	return ctx
}

func beginsTx(b *pgx.Batch) bool {
	return b != nil && len(b.QueuedQueries) > 0 && txControl(b.QueuedQueries[0].SQL)
}

// TraceBatchQuery counts one statement of a batch, or the COMMIT that ends
// a transaction inside a batch.
func (c *SQLCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if !txControl(data.SQL) {
		c.statements.Add(1)
		return
	}
	if data.Err != nil {
		return
	}
	switch data.CommandTag.String() {
	case "COMMIT":
		c.transactions.Add(1)
	case "ROLLBACK":
		c.rollbacks.Add(1)
	}
}

// TraceBatchEnd does nothing.
func (c *SQLCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

var (
	_ pgx.QueryTracer = (*SQLCounter)(nil)
	_ pgx.BatchTracer = (*SQLCounter)(nil)
)

// streamSeqs reads the last sequence of every stream of the account: the
// number of messages each has stored since it was created (duplicates the
// broker dropped by Nats-Msg-Id are not stored and not counted).
func streamSeqs(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	out := map[string]uint64{}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		out[info.Config.Name] = info.State.LastSeq
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	return out, nil
}

// processUsage is this process's CPU time (user + system) and its peak
// resident set size in bytes.
func processUsage() (cpu time.Duration, maxRSS int64, err error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, fmt.Errorf("getrusage: %w", err)
	}
	cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return cpu, int64(ru.Maxrss) * 1024, nil // Linux reports kilobytes
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times; 100 on
// every Linux platform Go supports.
const clockTicks = 100

// treeCPU is the CPU time of process pid and all its descendants, alive
// or exited and waited for, read from /proc. It is how the bench measures
// the private PostgreSQL: the postmaster and its backends.
func treeCPU(pid int) (time.Duration, error) {
	children := map[int][]int{}
	stats := map[int][]string{}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		f, err := procStat(p)
		if err != nil {
			continue // exited meanwhile
		}
		stats[p] = f
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	if _, ok := stats[pid]; !ok {
		return 0, fmt.Errorf("process %d not found", pid)
	}
	var ticks int64
	var walk func(p int)
	walk = func(p int) {
		f := stats[p]
		// After the name: state(0) ppid(1) ... utime(11) stime(12)
		// cutime(13) cstime(14).
		for _, i := range []int{11, 12, 13, 14} {
			if v, err := strconv.ParseInt(f[i], 10, 64); err == nil {
				ticks += v
			}
		}
		for _, c := range children[p] {
			walk(c)
		}
	}
	walk(pid)
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// procStat returns the fields of /proc/<pid>/stat after the command
// name, which may itself hold spaces and parentheses.
func procStat(pid int) ([]string, error) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, err
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return nil, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return f, nil
}

// childPostgres finds the postmaster among this process's children: the
// private PostgreSQL a stack started. It returns 0 when there is none, or
// more than one.
func childPostgres() int {
	self := os.Getpid()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	found := 0
	for _, d := range dirs {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		f, err := procStat(p)
		if err != nil || f[1] != strconv.Itoa(self) {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", d.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		if found != 0 {
			return 0
		}
		found = p
	}
	return found
}
