package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/wire"
)

// ErrExecutionNotFound is returned for an execution id that does not exist.
var ErrExecutionNotFound = errors.New("execution not found")

// Execution is one row of executions.
type Execution struct {
	ExecutionID    string
	Shard          int
	WorkflowName   string
	WorkflowID     string
	TaskQueue      string
	Status         string
	Input          json.RawMessage
	Result         json.RawMessage
	Error          json.RawMessage
	LastSeq        int
	WFTID          int
	WFTOutstanding bool
	WFTDirty       bool
	IdempotencyKey *string
	// CompletionCallback is the URL the outcome is POSTed to on close.
	CompletionCallback *string
	// StartedBy names the API token whose request started the execution.
	StartedBy *string
	// TraceParent is the W3C traceparent of the start's apply, "" when
	// tracing was off: tasks with no command behind them (a timer, a
	// task sent again) are traced under it.
	TraceParent string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	ClosedAt    *time.Time
	// PruneAfter is when a closed execution may be pruned: its close plus
	// its workflow's retention, set when it closes; nil while it runs.
	PruneAfter *time.Time
	// TaskFailing says why its last workflow task failed on its worker,
	// while it does; nil otherwise.
	TaskFailing *api.TaskFailing
	// Versioning is wire.VersioningPinned or wire.VersioningAutoUpgrade
	// ("" is stored as auto_upgrade).
	Versioning string
	// PinnedBuild is the build a pinned execution's workflow tasks go to;
	// "" while its first task's build is not known, and for an
	// auto-upgrading one.
	PinnedBuild string
	// HistoryBase is the last history event the worker that completed the
	// execution's last workflow task had seen (its base_seq), 0 before
	// one completed: its next task carries the events from there on.
	HistoryBase int
	// ChainID is the first run of the chain of continued runs this one
	// belongs to, "" for a first run (Chain says which it is).
	// ContinuedFrom is the run this one continues, ContinuedAs the run
	// that continued this one (harvest.ContinueAsNew); "" for none.
	ChainID, ContinuedFrom, ContinuedAs string
	// HistoryBytes is the size of its history: the sum, over its events,
	// of their types' and attributes' lengths as the scheduler appended
	// them (its length is LastSeq).
	HistoryBytes int64
	// HistoryWarning holds the limits its history was held to when it
	// passed a warning threshold (its Message, Events and Bytes unset);
	// nil before.
	HistoryWarning *api.HistoryWarning
	// Updates are its updates in flight and how many it was asked for;
	// nil before its first update.
	Updates *RunUpdates
	// StickyWorker is the worker that holds it in its cache after its last
	// workflow task (wire.WorkflowTaskResult.Sticky), "" for none.
	StickyWorker string
	// CancelRequest is how the run was asked to cancel
	// (WorkflowCancelRequested), nil if it was not.
	CancelRequest *CancelRequest
	// Timeouts bound the run and its chain, nil for none.
	Timeouts *Timeouts
	// Parent is the execution that started this one as its child, nil
	// for none; Children are the children this one started.
	Parent   *wire.ParentRef
	Children *RunChildren
	// Concurrency is the concurrency start policy the execution's chain
	// runs under, nil for none (docs/start-policies.md#concurrency).
	Concurrency *ConcurrencyRef
	// Priority is the priority of its tasks (wire.MinPriority to
	// wire.MaxPriority; 0 is wire.DefaultPriority, as stored), chosen by
	// its start and kept by its continued runs.
	Priority int
	// Reset links the run to a reset (docs/reset.md): the run it was
	// reset from and the keys it inherits, or the run that reset it; nil
	// for neither. A run that was reset also has ContinuedAs set to the
	// new run, so that its chain's newest run is the new one.
	Reset *wire.ResetInfo
	// Waiting is what its workflow code waits for, as its last workflow
	// task left it (api.Execution.WaitingOn); nil before its first task
	// and once it closes.
	Waiting *api.Waiting
}

// ResetKeys are the activity keys e inherits from the run it was reset
// from, nil for none.
func (e *Execution) ResetKeys() map[int]wire.ResetKey {
	if e.Reset == nil {
		return nil
	}
	return e.Reset.Keys
}

// ConcurrencyRef is the concurrency start policy an execution runs
// under: the value of its key, its limit, and when the execution began
// (took a slot), nil while it is Pending.
type ConcurrencyRef struct {
	// Workflow is the workflow whose policy the key is of, when it is
	// not the execution's own: a chain that continued as another
	// workflow keeps its first workflow's slot.
	Workflow string     `json:"workflow,omitempty"`
	Key      string     `json:"key"`
	Limit    int        `json:"limit"`
	BeganAt  *time.Time `json:"began_at,omitempty"`
	// RunTimeoutMS and ExecutionTimeoutMS are a Pending execution's
	// start's own timeouts, armed when it begins.
	RunTimeoutMS       int64 `json:"run_timeout_ms,omitempty"`
	ExecutionTimeoutMS int64 `json:"execution_timeout_ms,omitempty"`
}

// Timeouts are an execution's run and execution timeouts
// (docs/cancellation.md#timeouts): how long each is, and when it ends.
// A run that continues as new passes ExecutionDeadline, and its run
// timeout, on to the next.
type Timeouts struct {
	RunMS             int64      `json:"run_ms,omitempty"`
	RunDeadline       *time.Time `json:"run_deadline,omitempty"`
	ExecutionMS       int64      `json:"execution_ms,omitempty"`
	ExecutionDeadline *time.Time `json:"execution_deadline,omitempty"`
}

// CancelRequest is how an execution was asked to cancel: when, why, by
// what (wire.WorkflowCancelRequestedAttrs.Cause), and until when its code
// may run before it is terminated (nil: no bound). A run that continues
// as new after the request passes it on.
type CancelRequest struct {
	At       time.Time  `json:"at"`
	Reason   string     `json:"reason,omitempty"`
	Cause    string     `json:"cause,omitempty"`
	Deadline *time.Time `json:"deadline,omitempty"`
}

// Chain is the first run of e's chain of continued runs: e's own id for
// a run that continues none. Keyed signals are claimed under it.
func (e *Execution) Chain() string {
	if e.ChainID != "" {
		return e.ChainID
	}
	return e.ExecutionID
}

// versioningOrDefault is how v is stored.
func versioningOrDefault(v string) string {
	if v == "" {
		return wire.VersioningAutoUpgrade
	}
	return v
}

// nullIfEmpty is s, or NULL for "".
func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

const executionColumns = `execution_id::text, shard, workflow_name, workflow_id, task_queue, status, input, result, error,
	last_seq, wft_id, wft_outstanding, wft_dirty, idempotency_key, completion_callback, created_at, updated_at, closed_at, started_by, trace_parent, prune_after, task_failing, versioning, pinned_build, history_base,
	coalesce(chain_id::text, ''), coalesce(continued_from::text, ''), coalesce(continued_as::text, ''), history_bytes, history_warning, updates, coalesce(sticky_worker, ''), cancel_request, timeouts, parent, children, concurrency, priority, reset, waiting`

func scanExecution(row pgx.Row) (*Execution, error) {
	var e Execution
	var traceParent, pinned *string
	err := row.Scan(&e.ExecutionID, &e.Shard, &e.WorkflowName, &e.WorkflowID, &e.TaskQueue, &e.Status, &e.Input, &e.Result, &e.Error,
		&e.LastSeq, &e.WFTID, &e.WFTOutstanding, &e.WFTDirty, &e.IdempotencyKey, &e.CompletionCallback, &e.CreatedAt, &e.UpdatedAt, &e.ClosedAt, &e.StartedBy,
		&traceParent, &e.PruneAfter, &e.TaskFailing, &e.Versioning, &pinned, &e.HistoryBase, &e.ChainID, &e.ContinuedFrom, &e.ContinuedAs,
		&e.HistoryBytes, &e.HistoryWarning, &e.Updates, &e.StickyWorker, &e.CancelRequest, &e.Timeouts, &e.Parent, &e.Children, &e.Concurrency, &e.Priority, &e.Reset, &e.Waiting)
	if err != nil {
		return nil, err
	}
	if traceParent != nil {
		e.TraceParent = *traceParent
	}
	if pinned != nil {
		e.PinnedBuild = *pinned
	}
	return &e, nil
}

// queryExecutions runs sql, which selects executionColumns, and returns
// the executions it reads; what names the read in its errors.
func queryExecutions(ctx context.Context, db DBTX, what, sql string, args ...any) ([]*Execution, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []*Execution
	if err := eachExecution(rows, what, func(e *Execution) { out = append(out, e) }); err != nil {
		return nil, err
	}
	return out, nil
}

// eachExecution scans each row of rows (executionColumns) and hands the
// execution to put; what names the read in its errors.
func eachExecution(rows pgx.Rows, what string, put func(*Execution)) error {
	for rows.Next() {
		e, err := scanExecution(rows)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		put(e)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// WorkflowRef names executions by workflow id.
type WorkflowRef struct {
	WorkflowName string
	WorkflowID   string
}

// LatestByWorkflowID returns, for each (workflow_name, workflow_id), its most
// recent execution, locked for update.
func LatestByWorkflowID(ctx context.Context, tx Tx, refs []WorkflowRef) (map[WorkflowRef]*Execution, error) {
	return readAlone(ctx, tx, refs, (*Reads).LatestByWorkflowID)
}

// LoadExecutions returns the executions with the given ids, locked for
// update. Unknown ids are absent from the map.
func LoadExecutions(ctx context.Context, tx Tx, ids []string) (map[string]*Execution, error) {
	return readAlone(ctx, tx, ids, (*Reads).LoadExecutions)
}

// GetExecution reads one execution, or returns ErrExecutionNotFound.
func GetExecution(ctx context.Context, db DBTX, executionID string) (*Execution, error) {
	e, err := scanExecution(db.QueryRow(ctx, `SELECT `+executionColumns+` FROM executions WHERE execution_id = $1`, executionID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("get execution %s: %w", executionID, ErrExecutionNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get execution %s: %w", executionID, err)
	}
	return e, nil
}

// ListFilter narrows ListExecutions; zero fields match everything.
type ListFilter struct {
	WorkflowName string
	// WorkflowNames, when not nil, keeps only executions of these
	// workflows.
	WorkflowNames []string
	Status        string
	// TaskQueue keeps executions of this task queue.
	TaskQueue string
	// KeyPrefix and WorkflowIDPrefix keep executions whose start's
	// idempotency key, or whose workflow_id, begins with them (byte-wise).
	KeyPrefix        string
	WorkflowIDPrefix string
	// CreatedAfter and CreatedBefore bound created_at: after is
	// inclusive, before exclusive.
	CreatedAfter, CreatedBefore *time.Time
	// After, when set, continues a listing after that execution (the last
	// of the previous page): the newest-first order is (created_at,
	// execution_id) descending, so a page never repeats or skips an
	// execution because newer ones arrived meanwhile.
	After *ListCursor
	Limit int
	// Search are conditions on search attributes, each holding.
	Search []searchattr.Condition
}

// ListCursor is the position of an execution in ListExecutions' order.
type ListCursor struct {
	CreatedAt   time.Time
	ExecutionID string
}

// likePrefix is a LIKE pattern matching strings that begin with prefix.
func likePrefix(prefix string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix) + "%"
}

// ListExecutions returns the newest executions matching f.
func ListExecutions(ctx context.Context, db DBTX, f ListFilter) ([]*Execution, error) {
	where, args := listWhere(f)
	args = append(args, f.Limit)
	q := `SELECT ` + executionColumns + ` FROM executions` + where + fmt.Sprintf(" ORDER BY created_at DESC, execution_id DESC LIMIT $%d", len(args))
	// Planned with the values at hand (not a cached generic plan), so that
	// a LIKE prefix can use its index.
	return queryExecutions(ctx, db, "list executions", q, append([]any{pgx.QueryExecModeExec}, args...)...)
}

// CountExecutions counts the executions matching f (its Limit left
// out).
func CountExecutions(ctx context.Context, db DBTX, f ListFilter) (int64, error) {
	where, args := listWhere(f)
	var n int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM executions`+where, append([]any{pgx.QueryExecModeExec}, args...)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count executions: %w", err)
	}
	return n, nil
}

// filterWhere adds to where the conditions of f but its cursor, their
// values through arg.
func filterWhere(where []string, arg func(any) string, f ListFilter) []string {
	if f.WorkflowName != "" {
		where = append(where, "workflow_name = "+arg(f.WorkflowName))
	}
	if f.WorkflowNames != nil {
		where = append(where, "workflow_name = ANY("+arg(f.WorkflowNames)+"::text[])")
	}
	if f.Status != "" {
		where = append(where, "status = "+arg(f.Status))
	}
	if f.TaskQueue != "" {
		where = append(where, "task_queue = "+arg(f.TaskQueue))
	}
	if f.KeyPrefix != "" {
		where = append(where, "idempotency_key LIKE "+arg(likePrefix(f.KeyPrefix)))
	}
	if f.WorkflowIDPrefix != "" {
		where = append(where, "workflow_id LIKE "+arg(likePrefix(f.WorkflowIDPrefix)))
	}
	if f.CreatedAfter != nil {
		where = append(where, "created_at >= "+arg(*f.CreatedAfter))
	}
	if f.CreatedBefore != nil {
		where = append(where, "created_at < "+arg(*f.CreatedBefore))
	}
	return searchConditions(where, arg, f.Search)
}

// ClosedExecutions returns those of the given executions that have
// closed, with their status, result and closed_at. `harvest bench` polls
// it with the executions it still waits for, so each poll reads only
// those, by primary key.
func ClosedExecutions(ctx context.Context, db DBTX, executionIDs []string) ([]*Execution, error) {
	if len(executionIDs) == 0 {
		return nil, nil
	}
	return queryExecutions(ctx, db, "read closed executions", `SELECT `+executionColumns+` FROM executions
		WHERE execution_id = ANY($1::uuid[]) AND status <> 'Running'`, executionIDs)
}

// LatestByWorkflowID puts in out, for each (workflow_name, workflow_id),
// its most recent execution, locked for update.
func (r *Reads) LatestByWorkflowID(refs []WorkflowRef, out map[WorkflowRef]*Execution) {
	if len(refs) == 0 {
		return
	}
	names := make([]string, len(refs))
	ids := make([]string, len(refs))
	for i, ref := range refs {
		names[i], ids[i] = ref.WorkflowName, ref.WorkflowID
	}
	// One index probe per ref (executions_workflow_id_idx), newest first:
	// a plan PostgreSQL makes quickly and cannot turn into a scan.
	r.b.Queue(`
		SELECT e.* FROM unnest($1::text[], $2::text[]) AS u(n, id)
		CROSS JOIN LATERAL (
			SELECT `+executionColumns+` FROM executions
			WHERE workflow_name = u.n AND workflow_id = u.id
			ORDER BY created_at DESC LIMIT 1
		) AS e`, names, ids).Query(func(rows pgx.Rows) error {
		return eachExecution(rows, "look up executions by workflow id", func(e *Execution) {
			out[WorkflowRef{e.WorkflowName, e.WorkflowID}] = e
		})
	})
}

// LoadExecutions puts in out the executions with the given ids, locked for
// update. Unknown ids are left out.
func (r *Reads) LoadExecutions(ids []string, out map[string]*Execution) {
	if len(ids) == 0 {
		return
	}
	r.b.Queue(`SELECT `+executionColumns+` FROM executions WHERE execution_id = ANY($1::uuid[]) FOR UPDATE`, ids).Query(func(rows pgx.Rows) error {
		return eachExecution(rows, "load executions", func(e *Execution) { out[e.ExecutionID] = e })
	})
}

// LoadChainsLatest loads, for each chain of continued runs (by its first
// run's id), its newest run: the one no run continued yet, locked.
func (r *Reads) LoadChainsLatest(chains []string, out map[string]*Execution) {
	if len(chains) == 0 {
		return
	}
	r.b.Queue(`SELECT `+executionColumns+` FROM executions WHERE chain_id = ANY($1::uuid[]) AND continued_as IS NULL FOR UPDATE`, chains).Query(func(rows pgx.Rows) error {
		return eachExecution(rows, "load the newest runs of chains", func(e *Execution) { out[e.ChainID] = e })
	})
}

func queueInsertExecutions(b *pgx.Batch, es []*Execution) {
	if len(es) == 0 {
		return
	}
	n := len(es)
	var (
		ids, names, wfIDs, queues, statuses = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		shards, lastSeqs, wftIDs            = make([]int, n), make([]int, n), make([]int, n)
		inputs, results, errs               = make([]json.RawMessage, n), make([]json.RawMessage, n), make([]json.RawMessage, n)
		outstanding, dirty                  = make([]bool, n), make([]bool, n)
		keys, callbacks, startedBy          = make([]*string, n), make([]*string, n), make([]*string, n)
		traceParents                        = make([]*string, n)
		created, updated                    = make([]time.Time, n), make([]time.Time, n)
		closed, pruneAfter                  = make([]*time.Time, n), make([]*time.Time, n)
		failing                             = make([]*api.TaskFailing, n)
		versioning, pinned                  = make([]string, n), make([]*string, n)
		bases                               = make([]int, n)
		chains, froms, ases                 = make([]*string, n), make([]*string, n), make([]*string, n)
		historyBytes                        = make([]int64, n)
		warnings                            = make([]*api.HistoryWarning, n)
		updates                             = make([]*RunUpdates, n)
		sticky                              = make([]*string, n)
		cancelReqs                          = make([]*CancelRequest, n)
		timeouts                            = make([]*Timeouts, n)
		parents                             = make([]*wire.ParentRef, n)
		children                            = make([]*RunChildren, n)
		concurrency                         = make([]*ConcurrencyRef, n)
		priorities                          = make([]int, n)
		resets                              = make([]*wire.ResetInfo, n)
	)
	for i, e := range es {
		priorities[i], resets[i] = PriorityOrDefault(e.Priority), e.Reset
		sticky[i], cancelReqs[i], timeouts[i] = nullIfEmpty(e.StickyWorker), e.CancelRequest, e.Timeouts
		parents[i], children[i], concurrency[i] = e.Parent, e.Children, e.Concurrency
		pruneAfter[i], failing[i], bases[i] = e.PruneAfter, e.TaskFailing, e.HistoryBase
		historyBytes[i], warnings[i], updates[i] = e.HistoryBytes, e.HistoryWarning, e.Updates
		chains[i], froms[i], ases[i] = nullIfEmpty(e.ChainID), nullIfEmpty(e.ContinuedFrom), nullIfEmpty(e.ContinuedAs)
		versioning[i], pinned[i] = versioningOrDefault(e.Versioning), nullIfEmpty(e.PinnedBuild)
		ids[i], shards[i], names[i], wfIDs[i], queues[i], statuses[i] = e.ExecutionID, e.Shard, e.WorkflowName, e.WorkflowID, e.TaskQueue, e.Status
		inputs[i], results[i], errs[i] = e.Input, e.Result, e.Error
		lastSeqs[i], wftIDs[i], outstanding[i], dirty[i] = e.LastSeq, e.WFTID, e.WFTOutstanding, e.WFTDirty
		keys[i], callbacks[i], created[i], updated[i], closed[i] = e.IdempotencyKey, e.CompletionCallback, e.CreatedAt, e.UpdatedAt, e.ClosedAt
		startedBy[i] = e.StartedBy
		if e.TraceParent != "" {
			traceParents[i] = &e.TraceParent
		}
	}
	b.Queue(`INSERT INTO executions (execution_id, shard, workflow_name, workflow_id, task_queue, status, input, result, error,
			last_seq, wft_id, wft_outstanding, wft_dirty, idempotency_key, completion_callback, created_at, updated_at, closed_at, started_by,
			trace_parent, prune_after, task_failing, versioning, pinned_build, history_base, chain_id, continued_from, continued_as,
			history_bytes, history_warning, updates, sticky_worker, cancel_request, timeouts, parent, children, concurrency, priority, reset)
		SELECT unnest($1::uuid[]), unnest($2::int[]), unnest($3::text[]), unnest($4::text[]), unnest($5::text[]), unnest($6::text[]),
			unnest($7::jsonb[]), unnest($8::jsonb[]), unnest($9::jsonb[]), unnest($10::int[]), unnest($11::int[]), unnest($12::bool[]),
			unnest($13::bool[]), unnest($14::text[]), unnest($15::text[]), unnest($16::timestamptz[]), unnest($17::timestamptz[]),
			unnest($18::timestamptz[]), unnest($19::text[]), unnest($20::text[]), unnest($21::timestamptz[]), unnest($22::jsonb[]),
			unnest($23::text[]), unnest($24::text[]), unnest($25::int[]),
			unnest($26::uuid[]), unnest($27::uuid[]), unnest($28::uuid[]), unnest($29::bigint[]), unnest($30::jsonb[]), unnest($31::jsonb[]), unnest($32::text[]),
			unnest($33::jsonb[]), unnest($34::jsonb[]), unnest($35::jsonb[]), unnest($36::jsonb[]), unnest($37::jsonb[]), unnest($38::smallint[]), unnest($39::jsonb[])`,
		ids, shards, names, wfIDs, queues, statuses, inputs, results, errs,
		lastSeqs, wftIDs, outstanding, dirty, keys, callbacks, created, updated, closed, startedBy, traceParents, pruneAfter, failing,
		versioning, pinned, bases, chains, froms, ases, historyBytes, warnings, updates, sticky, cancelReqs, timeouts, parents, children, concurrency, priorities, resets)
}

// PriorityOrDefault is priority, or wire.DefaultPriority for 0.
func PriorityOrDefault(priority int) int {
	if priority == 0 {
		return wire.DefaultPriority
	}
	return priority
}

func queueUpdateExecutions(b *pgx.Batch, es []*Execution) {
	es = lastOf(es, func(e *Execution) string { return e.ExecutionID })
	if len(es) < setBasedUpdateRows {
		for _, e := range es {
			b.Queue(`UPDATE executions SET status = $2, result = $3, error = $4, last_seq = $5, wft_id = $6,
				wft_outstanding = $7, wft_dirty = $8, updated_at = $9, closed_at = $10, prune_after = $11, task_failing = $12, pinned_build = $13, history_base = $14, continued_as = $15,
				history_bytes = $16, history_warning = $17, updates = $18, sticky_worker = $19, cancel_request = $20, children = $21,
				timeouts = $22, concurrency = $23, reset = $24, waiting = $25 WHERE execution_id = $1`,
				e.ExecutionID, e.Status, e.Result, e.Error, e.LastSeq, e.WFTID, e.WFTOutstanding, e.WFTDirty, e.UpdatedAt, e.ClosedAt, e.PruneAfter, e.TaskFailing,
				nullIfEmpty(e.PinnedBuild), e.HistoryBase, nullIfEmpty(e.ContinuedAs), e.HistoryBytes, e.HistoryWarning, e.Updates, nullIfEmpty(e.StickyWorker), e.CancelRequest, e.Children,
				e.Timeouts, e.Concurrency, e.Reset, e.Waiting)
		}
		return
	}
	n := len(es)
	var (
		ids, statuses      = make([]string, n), make([]string, n)
		results, errs      = make([]json.RawMessage, n), make([]json.RawMessage, n)
		lastSeqs, wftIDs   = make([]int, n), make([]int, n)
		outstanding, dirty = make([]bool, n), make([]bool, n)
		updated            = make([]time.Time, n)
		closed, pruneAfter = make([]*time.Time, n), make([]*time.Time, n)
		failing            = make([]*api.TaskFailing, n)
		pinned             = make([]*string, n)
		bases              = make([]int, n)
		ases               = make([]*string, n)
		historyBytes       = make([]int64, n)
		warnings           = make([]*api.HistoryWarning, n)
		updates            = make([]*RunUpdates, n)
		sticky             = make([]*string, n)
		cancelReqs         = make([]*CancelRequest, n)
		children           = make([]*RunChildren, n)
		timeouts           = make([]*Timeouts, n)
		concurrency        = make([]*ConcurrencyRef, n)
		resets             = make([]*wire.ResetInfo, n)
		waiting            = make([]*api.Waiting, n)
	)
	for i, e := range es {
		timeouts[i], concurrency[i], resets[i], waiting[i] = e.Timeouts, e.Concurrency, e.Reset, e.Waiting
		failing[i], pinned[i], bases[i], updates[i] = e.TaskFailing, nullIfEmpty(e.PinnedBuild), e.HistoryBase, e.Updates
		sticky[i], cancelReqs[i], children[i] = nullIfEmpty(e.StickyWorker), e.CancelRequest, e.Children
		ases[i] = nullIfEmpty(e.ContinuedAs)
		historyBytes[i], warnings[i] = e.HistoryBytes, e.HistoryWarning
		ids[i], statuses[i], results[i], errs[i] = e.ExecutionID, e.Status, e.Result, e.Error
		lastSeqs[i], wftIDs[i], outstanding[i], dirty[i], updated[i], closed[i] = e.LastSeq, e.WFTID, e.WFTOutstanding, e.WFTDirty, e.UpdatedAt, e.ClosedAt
		pruneAfter[i] = e.PruneAfter
	}
	b.Queue(`UPDATE executions AS e SET status = v.status, result = v.result, error = v.error, last_seq = v.last_seq, wft_id = v.wft_id,
			wft_outstanding = v.wft_outstanding, wft_dirty = v.wft_dirty, updated_at = v.updated_at, closed_at = v.closed_at,
			prune_after = v.prune_after, task_failing = v.task_failing, pinned_build = v.pinned_build,
			history_base = v.history_base, continued_as = v.continued_as,
			history_bytes = v.history_bytes, history_warning = v.history_warning, updates = v.updates, sticky_worker = v.sticky_worker,
			cancel_request = v.cancel_request, children = v.children, timeouts = v.timeouts, concurrency = v.concurrency, reset = v.reset,
			waiting = v.waiting
		FROM (SELECT unnest($1::uuid[]) AS execution_id, unnest($2::text[]) AS status, unnest($3::jsonb[]) AS result,
			unnest($4::jsonb[]) AS error, unnest($5::int[]) AS last_seq, unnest($6::int[]) AS wft_id, unnest($7::bool[]) AS wft_outstanding,
			unnest($8::bool[]) AS wft_dirty, unnest($9::timestamptz[]) AS updated_at, unnest($10::timestamptz[]) AS closed_at,
			unnest($11::timestamptz[]) AS prune_after, unnest($12::jsonb[]) AS task_failing,
			unnest($13::text[]) AS pinned_build, unnest($14::int[]) AS history_base,
			unnest($15::uuid[]) AS continued_as, unnest($16::bigint[]) AS history_bytes, unnest($17::jsonb[]) AS history_warning,
			unnest($18::jsonb[]) AS updates, unnest($19::text[]) AS sticky_worker,
			unnest($20::jsonb[]) AS cancel_request, unnest($21::jsonb[]) AS children, unnest($22::jsonb[]) AS timeouts,
			unnest($23::jsonb[]) AS concurrency, unnest($24::jsonb[]) AS reset, unnest($25::jsonb[]) AS waiting) AS v
		WHERE e.execution_id = v.execution_id AND e.execution_id = ANY($1::uuid[])`,
		ids, statuses, results, errs, lastSeqs, wftIDs, outstanding, dirty, updated, closed, pruneAfter, failing, pinned, bases, ases,
		historyBytes, warnings, updates, sticky, cancelReqs, children, timeouts, concurrency, resets, waiting)
}

// CountByWorkflow counts executions by workflow name and status; names,
// when not nil, keeps only those workflows. It reads the whole table (an
// operator's page, not a hot path; retention bounds the table).
func CountByWorkflow(ctx context.Context, db DBTX, names []string) (map[string]map[string]int64, error) {
	rows, err := db.Query(ctx, `SELECT workflow_name, status, count(*) FROM executions
		WHERE $1::text[] IS NULL OR workflow_name = ANY($1) GROUP BY workflow_name, status`, names)
	if err != nil {
		return nil, fmt.Errorf("count executions by workflow: %w", err)
	}
	defer rows.Close()
	out := map[string]map[string]int64{}
	for rows.Next() {
		var name, status string
		var n int64
		if err := rows.Scan(&name, &status, &n); err != nil {
			return nil, fmt.Errorf("count executions by workflow: %w", err)
		}
		if out[name] == nil {
			out[name] = map[string]int64{}
		}
		out[name][status] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count executions by workflow: %w", err)
	}
	return out, nil
}

// ExecutionDetails are what describe shows of an execution besides its
// row: its start key's claim, its keyed signals, its completion callback.
type ExecutionDetails struct {
	// Claim is nil for an unkeyed start, or once the claim is gone (swept
	// after it expired, or taken over by a later start of the key).
	Claim      *KeyClaim
	SignalKeys []SignalKey
	Callback   *CallbackState
	// PendingActivities are the activities scheduled and not closed, each
	// name and task queue once (a running execution's only).
	PendingActivities []PendingActivity
	// SearchAttributes are its search attributes, by name, as JSON
	// values; nil for none.
	SearchAttributes map[string]any
	// OpenActivities are its activities scheduled and not closed, with
	// their attempts (a running execution's only).
	OpenActivities []*Activity
}

// GetExecutionDetails reads e's details in one round trip; types are its
// workflow's declared search attributes (their types tell an int from a
// double, a bool from a keyword).
func GetExecutionDetails(ctx context.Context, db Tx, e *Execution, types map[string]string) (*ExecutionDetails, error) {
	var d ExecutionDetails
	var r Reads
	r.SearchAttributes(e.ExecutionID, types, &d.SearchAttributes)
	if e.IdempotencyKey != nil {
		// A run a reset made keeps its first run's key, whose claim names
		// that run: the first of its chain.
		claimed := e.ExecutionID
		if e.Reset != nil && e.Reset.From != "" {
			claimed = e.Chain()
		}
		r.ExecutionClaim(ClaimRef{WorkflowName: e.WorkflowName, IdempotencyKey: *e.IdempotencyKey}, claimed, &d.Claim)
	}
	r.SignalKeys(e.ExecutionID, &d.SignalKeys)
	if e.Status == wire.StatusRunning {
		r.PendingActivities(e.ExecutionID, &d.PendingActivities)
		r.OpenActivities(e.ExecutionID, &d.OpenActivities)
	}
	if e.CompletionCallback != nil {
		r.Callback(e.ExecutionID, &d.Callback)
	}
	if err := r.Send(ctx, db); err != nil {
		return nil, fmt.Errorf("read details of execution %s: %w", e.ExecutionID, err)
	}
	return &d, nil
}
