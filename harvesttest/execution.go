package harvesttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"time"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// ErrNotClosed is returned by Execution.Result while the execution runs.
var ErrNotClosed = errors.New("execution has not closed")

// Execution is a handle on one execution of the Env.
type Execution struct {
	env *Env
	// ID is the execution id.
	ID           string
	WorkflowName string
	WorkflowID   string
	// Deduplicated says the start resolved to an execution an earlier
	// start with its key started: nothing new ran.
	Deduplicated bool
	// StartedFresh says the start created the execution. A start that
	// is neither fresh nor deduplicated resolved to the existing
	// execution of its workflow_id (the default reuse policy).
	StartedFresh bool
}

// Start starts workflow with input (encoded as JSON), as a client's start
// does, and runs the tasks that follow until they wait (for a signal, a
// timer, a retry, the clock). A refused start returns a *client.APIError
// (errors.Is: client.ErrUnknownWorkflow, client.ErrInputInvalid, ...).
// When a workflow task fails (harvest.ErrNonDeterministic, a
// *harvest.VersionError, a panic), the execution is returned with the
// error; as in a deployment it stays Running, Describe shows why
// (TaskFailing), and the task is dispatched again after the scheduler's
// backoff (1 s, doubling, at most 5 minutes) on the test's clock. opts is
// at most one StartOptions.
func (e *Env) Start(ctx context.Context, workflow string, input any, opts ...StartOptions) (*Execution, error) {
	raw, err := json.Marshal(input)
	if err != nil {
		return nil, fmt.Errorf("harvesttest: start %s: encode input: %w", workflow, err)
	}
	s := &wire.StartCommand{WorkflowName: workflow, Input: raw, TaskQueue: wire.DefaultTaskQueue}
	if err := mergeStart(opts).apply(s); err != nil {
		return nil, fmt.Errorf("harvesttest: start %s: %w", workflow, err)
	}
	e.run.Lock()
	defer e.run.Unlock()
	e.mu.Lock()
	out, err := e.start(ctx, s)
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	x := &Execution{env: e, ID: out.ExecutionID, WorkflowName: out.WorkflowName, WorkflowID: out.WorkflowID, Deduplicated: out.Deduplicated, StartedFresh: out.StartedFresh}
	return x, e.drain(ctx)
}

// checkStart refuses, as ingest does, a start of a workflow no worker
// serves, one holding what Harvest cannot store, one with an unknown
// reuse policy, and a fresh start whose input fails the workflow's
// schema. Call with mu held.
func (e *Env) checkStart(s *wire.StartCommand) error {
	if !slices.Contains(e.worker.Workflows(), s.WorkflowName) {
		return &client.APIError{StatusCode: http.StatusNotFound, Code: client.CodeUnknownWorkflow,
			Message: fmt.Sprintf("no worker serves workflow %q", s.WorkflowName)}
	}
	// What ingest refuses before anything: what Harvest cannot store.
	for field, err := range map[string]error{"idempotency_key": checkIdentifier(s.IdempotencyKey), "workflow_id": checkIdentifier(s.WorkflowID),
		"input": checkJSON(s.Input)} {
		if err != nil {
			return &client.APIError{StatusCode: http.StatusBadRequest, Code: client.CodePayloadUnstorable, Field: field,
				Message: fmt.Sprintf("%s %v", field, err)}
		}
	}
	if !wire.ValidReusePolicy(s.ReusePolicy) {
		return &client.APIError{StatusCode: http.StatusBadRequest, Code: client.CodeInvalidReusePolicy, Field: "reuse_policy",
			Message: fmt.Sprintf("reuse_policy %q is not one of the policies", s.ReusePolicy)}
	}
	if err := searchattr.Schema(e.cfg.SearchAttributes).Check(s.WorkflowName, s.SearchAttributes); err != nil {
		return &client.APIError{StatusCode: http.StatusBadRequest, Code: client.CodeInvalidSearchAttribute, Field: "search_attributes", Message: err.Error()}
	}
	timeouts := scheduler.WorkflowTimeouts{Run: time.Duration(s.RunTimeoutMS) * time.Millisecond, Execution: time.Duration(s.ExecutionTimeoutMS) * time.Millisecond}
	if err := timeouts.Validate(); err != nil {
		return &client.APIError{StatusCode: http.StatusBadRequest, Code: client.CodeInvalidTimeout, Message: err.Error()}
	}
	_, replay := e.mem.LiveClaim(s.WorkflowName, s.IdempotencyKey, e.now)
	if sch := e.worker.Schema(s.WorkflowName); sch != nil && !replay {
		// Ingest checks a fresh start's input; a keyed replay of a
		// committed start is never refused.
		if vs := sch.Validate(s.Input); len(vs) > 0 {
			apiErr := &client.APIError{StatusCode: http.StatusUnprocessableEntity, Code: client.CodeInputInvalid, Field: "input",
				Message: fmt.Sprintf("input does not match the schema of workflow %q", s.WorkflowName)}
			for _, v := range vs {
				apiErr.Violations = append(apiErr.Violations, client.Violation(v))
			}
			return apiErr
		}
	}
	return nil
}

// SignalWithStart sends the signal name with payload to the running
// execution of workflow whose workflow_id is workflowID, starting it
// first with input when there is none (then the signal is its history's
// first event after WorkflowStarted), as the API's signal-with-start
// does, and runs the tasks that follow. opts, at most one StartOptions,
// apply to the start (ReusePolicy, IdempotencyKey); the workflow_id is
// workflowID, so a StartOptions.WorkflowID other than it is refused.
func (e *Env) SignalWithStart(ctx context.Context, workflow, workflowID, name string, payload, input any, opts ...StartOptions) (*Execution, error) {
	if workflowID == "" {
		return nil, &client.APIError{StatusCode: http.StatusBadRequest, Code: client.CodeInvalidWorkflowID, Field: "workflow_id",
			Message: "signal-with-start needs a workflow_id"}
	}
	o := mergeStart(opts)
	if o.WorkflowID != "" && o.WorkflowID != workflowID {
		return nil, fmt.Errorf("harvesttest: signal-with-start %s: StartOptions.WorkflowID %q is not the workflowID %q: leave it empty", workflow, o.WorkflowID, workflowID)
	}
	rawIn, err := json.Marshal(input)
	if err != nil {
		return nil, fmt.Errorf("harvesttest: signal-with-start %s: encode input: %w", workflow, err)
	}
	rawSig, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("harvesttest: signal-with-start %s: encode payload: %w", workflow, err)
	}
	s := &wire.StartCommand{WorkflowName: workflow, WorkflowID: workflowID, Input: rawIn, TaskQueue: wire.DefaultTaskQueue}
	if err := o.apply(s); err != nil {
		return nil, fmt.Errorf("harvesttest: signal-with-start %s: %w", workflow, err)
	}
	e.run.Lock()
	defer e.run.Unlock()
	e.mu.Lock()
	if err := e.checkStart(s); err != nil {
		e.mu.Unlock()
		return nil, err
	}
	if err := checkJSON(rawSig); err != nil {
		e.mu.Unlock()
		return nil, &client.APIError{StatusCode: http.StatusBadRequest, Code: client.CodePayloadUnstorable, Field: "signal_payload", Message: "signal_payload " + err.Error()}
	}
	s.AcceptedAt = e.now
	out, err := e.apply(ctx, &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindSignalWithStart, SignalWithStart: true, Start: s,
		Signal: &wire.SignalCommand{SignalName: name, Payload: rawSig}})
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if out.Error != "" {
		return nil, refused(out)
	}
	x := &Execution{env: e, ID: out.ExecutionID, WorkflowName: out.WorkflowName, WorkflowID: out.WorkflowID, StartedFresh: out.StartedFresh}
	return x, e.drain(ctx)
}

// start checks a start as ingest does and applies it. Call with mu held.
func (e *Env) start(ctx context.Context, s *wire.StartCommand) (wire.Outcome, error) {
	if err := e.checkStart(s); err != nil {
		return wire.Outcome{}, err
	}
	if s.WorkflowID == "" {
		s.WorkflowID, s.WorkflowIDMinted = placement.MintWorkflowID(1, 0, s.WorkflowName), true
	}
	s.AcceptedAt = e.now
	id := dedup.NewID()
	if s.IdempotencyKey != "" {
		id = dedup.StartCommandID(s.WorkflowName, s.IdempotencyKey)
	}
	out, err := e.apply(ctx, &wire.Command{CommandID: id, Kind: wire.KindStart, Start: s})
	if err != nil {
		return out, err
	}
	if out.Error != "" {
		return out, refused(out)
	}
	return out, nil
}

// Execution is the execution id of this Env, as Start returned it: for
// an execution Start did not return, such as the run another continued
// as (Describe's ContinuedAs). Its methods fail for an id the Env has
// no execution of.
func (e *Env) Execution(id string) *Execution {
	x := &Execution{env: e, ID: id}
	e.mu.Lock()
	defer e.mu.Unlock()
	if ex, _, ok := e.mem.Execution(id); ok {
		x.WorkflowName, x.WorkflowID = ex.WorkflowName, ex.WorkflowID
	}
	return x
}

// Signal sends the signal name with payload (encoded as JSON) to x, and
// runs the tasks that follow. delivered is false when a keyed signal was
// delivered before (a duplicate is a result, not an error). A closed or
// missing execution returns a *client.APIError (client.ErrExecutionTerminal,
// client.ErrExecutionNotFound). opts is at most one SignalOptions.
func (x *Execution) Signal(ctx context.Context, name string, payload any, opts ...SignalOptions) (delivered bool, err error) {
	e := x.env
	raw, err := json.Marshal(payload)
	if err != nil {
		return false, fmt.Errorf("harvesttest: signal %s: encode payload: %w", name, err)
	}
	sg := &wire.SignalCommand{ExecutionID: x.ID, SignalName: name, Payload: raw, IdempotencyKey: mergeSignal(opts).IdempotencyKey}
	for field, err := range map[string]error{"idempotency_key": checkIdentifier(sg.IdempotencyKey), "payload": checkJSON(raw)} {
		if err != nil {
			return false, &client.APIError{StatusCode: http.StatusBadRequest, Code: client.CodePayloadUnstorable, Field: field,
				Message: fmt.Sprintf("%s %v", field, err)}
		}
	}
	id := dedup.NewID()
	if sg.IdempotencyKey != "" {
		id = dedup.SignalCommandID(x.ID, sg.IdempotencyKey)
	}
	e.run.Lock()
	defer e.run.Unlock()
	e.mu.Lock()
	out, err := e.apply(ctx, &wire.Command{CommandID: id, Kind: wire.KindSignal, Signal: sg})
	e.mu.Unlock()
	if err != nil {
		return false, err
	}
	if out.Error != "" {
		return false, refused(out)
	}
	return out.SignalDelivered, e.drain(ctx)
}

// Cancel asks the execution to cancel, as the API's cancel does: its
// workflow code is told at its next task (which runs before Cancel
// returns), gives up what it waits for, may clean up, and closes it
// Cancelled; one whose code never ran closes at once; a closed one is
// left as it ended. A second Cancel changes nothing.
func (x *Execution) Cancel(ctx context.Context, reason string) error {
	return x.CancelWithGrace(ctx, reason, 0)
}

// CancelWithGrace is Cancel with a grace (the API's cancel_grace): the
// execution is terminated if its code has not closed it grace after the
// request, on the Env's clock. Zero means the workflow's configured
// grace, if any (Config.CancelGraceByWorkflow).
func (x *Execution) CancelWithGrace(ctx context.Context, reason string, grace time.Duration) error {
	e := x.env
	e.run.Lock()
	defer e.run.Unlock()
	e.mu.Lock()
	out, err := e.apply(ctx, &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindCancel,
		Cancel: &wire.CancelCommand{ExecutionID: x.ID, Reason: reason, GraceMS: grace.Milliseconds()}})
	e.mu.Unlock()
	if err != nil {
		return err
	}
	if out.Error != "" {
		return refused(out)
	}
	return e.drain(ctx)
}

// Describe reads the execution as the API answers it; once retention
// has pruned it, the error matches client.ErrExecutionNotFound.
func (x *Execution) Describe() (client.Execution, error) {
	e := x.env
	e.mu.Lock()
	defer e.mu.Unlock()
	ex, _, ok := e.mem.Execution(x.ID)
	if !ok {
		return client.Execution{}, notFound(x.ID)
	}
	view := ex.View()
	view.TaskQueue = ex.TaskQueue
	if attrs := e.mem.SearchAttributes(x.ID); attrs != nil {
		// As a client decodes them from the API's JSON: numbers as float64.
		raw, err := json.Marshal(attrs)
		if err != nil {
			return client.Execution{}, fmt.Errorf("harvesttest: describe %s: %w", x.ID, err)
		}
		if err := json.Unmarshal(raw, &view.SearchAttributes); err != nil {
			return client.Execution{}, fmt.Errorf("harvesttest: describe %s: %w", x.ID, err)
		}
	}
	return view, nil
}

// Status is the execution's status (client.StatusRunning, ...).
func (x *Execution) Status() (string, error) {
	ex, err := x.Describe()
	return ex.Status, err
}

// Result decodes the result of a completed execution into out (a pointer,
// or nil). A running execution returns ErrNotClosed; one that failed, its
// failure as a *harvest.ApplicationError.
func (x *Execution) Result(out any) error {
	ex, err := x.Describe()
	if err != nil {
		return err
	}
	switch ex.Status {
	case client.StatusRunning:
		return fmt.Errorf("execution %s: %w", x.ID, ErrNotClosed)
	case client.StatusCompleted:
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(ex.Result, out); err != nil {
			return fmt.Errorf("execution %s: decode result: %w", x.ID, err)
		}
		return nil
	}
	var f wire.Failure
	_ = json.Unmarshal(ex.Error, &f)
	return fmt.Errorf("execution %s %s: %w", x.ID, ex.Status, &harvest.ApplicationError{Type: f.Type, Message: f.Message, NonRetryable: f.NonRetryable})
}

// History is the execution's history, oldest event first, as the API
// answers it.
func (x *Execution) History() ([]client.Event, error) {
	e := x.env
	e.mu.Lock()
	defer e.mu.Unlock()
	_, events, ok := e.mem.Execution(x.ID)
	if !ok {
		return nil, notFound(x.ID)
	}
	return store.EventViews(events), nil
}

// State reads the execution's query state name (harvest.SetQueryState)
// as the API answers it: its latest value, as the last workflow task
// that changed it left it, and the seq of that task's
// WorkflowTaskCompleted. A state the workflow code never set returns a
// *client.APIError matching client.ErrStateNotFound; a pruned or unknown
// execution one matching client.ErrExecutionNotFound.
func (x *Execution) State(name string) (client.State, error) {
	e := x.env
	e.mu.Lock()
	defer e.mu.Unlock()
	ex, _, ok := e.mem.Execution(x.ID)
	if !ok {
		return client.State{}, notFound(x.ID)
	}
	for _, st := range e.mem.States(x.ID) {
		if st.Name == name {
			return client.State{ExecutionID: x.ID, Name: st.Name, Value: st.Value, Seq: st.Seq, UpdatedAt: st.UpdatedAt, Status: ex.Status}, nil
		}
	}
	return client.State{}, &client.APIError{StatusCode: http.StatusNotFound, Code: client.CodeStateNotFound,
		Message: fmt.Sprintf("execution %s has no state %q", x.ID, name)}
}

// Replay replays each workflow task the execution completed, over the
// history that task saw, on a new worker that registers with register
// (nil: the Env's), as a worker that took over after a crash at that point
// would, and checks that it decides the same as the original did. A
// difference, or a replay that fails, is returned wrapping
// harvest.ErrNonDeterministic. A deployment's replayer checks the same
// (each decision's kind, name, input and options against the history);
// this also checks the decisions of the task being replayed, which the
// history does not record yet.
func (x *Execution) Replay(register func(*harvest.Worker)) error {
	e := x.env
	e.mu.Lock()
	tasks := slices.Clone(e.tasks[x.ID])
	if register == nil {
		register = e.register
	}
	e.mu.Unlock()
	b, err := bind(harvest.WorkerConfig{Logger: e.log}, register)
	if err != nil {
		return fmt.Errorf("harvesttest: replay: %w", err)
	}
	// Each task replays its whole history on fresh workflow code: the
	// worker keeps nothing between them.
	b.Close()
	run, ok := b.Handlers().Workflow(x.WorkflowName)
	if !ok {
		return fmt.Errorf("harvesttest: replay: workflow %q is not registered", x.WorkflowName)
	}
	check := func(what string, task *wire.WorkflowTask) ([]wire.Decision, error) {
		ran, err := run(task)
		got := ran.Decisions
		if err != nil {
			if errors.Is(err, harvest.ErrNonDeterministic) {
				return nil, fmt.Errorf("execution %s: replay of %s: %w", x.ID, what, err)
			}
			return nil, fmt.Errorf("execution %s: replay of %s: %w: %w", x.ID, what, harvest.ErrNonDeterministic, err)
		}
		return got, nil
	}
	for _, t := range tasks {
		what := fmt.Sprintf("workflow task %d", t.task.TaskID)
		got, err := check(what, t.task)
		if err != nil {
			return err
		}
		if !sameDecisions(got, t.decisions) {
			return fmt.Errorf("execution %s: replay of %s: %w: decided %s, the original decided %s",
				x.ID, what, harvest.ErrNonDeterministic, describeDecisions(got), describeDecisions(t.decisions))
		}
	}
	// The whole history as it stands, replayed: the replayer checks every
	// decision it records, with the side effects' recorded values (which
	// a replay of the task that first ran them runs again).
	e.mu.Lock()
	_, events, ok := e.mem.Execution(x.ID)
	e.mu.Unlock()
	if ok && len(tasks) > 0 {
		last := *tasks[len(tasks)-1].task
		last.TaskID++
		last.History = events
		if _, err := check("the whole history", &last); err != nil {
			return err
		}
	}
	return nil
}

// sameDecisions says whether a, a task's decisions on replay, are b, the
// original's.
func sameDecisions(a, b []wire.Decision) bool {
	for i := range a {
		if a[i].Type == wire.DecisionRecordVersion && (i >= len(b) || b[i].Type != wire.DecisionRecordVersion || *b[i].Version != *a[i].Version) {
			// The code reaches a change (harvest.GetVersion) that the
			// original did not record here: a worker taking over at this
			// task would take the branch the code chooses now, which is
			// the change's point. The replay of the whole history checks
			// that what the history recorded replays.
			return true
		}
		if i >= len(b) {
			return false
		}
	}
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		x.PossiblyStarted, y.PossiblyStarted = false, false
		if x.Marker != nil && y.Marker != nil && !wire.SameJSON(x.Marker.Value, y.Marker.Value) {
			// A side effect's value is its first run's: a replay of the
			// task that ran it runs it again, and what follows in the
			// task may depend on the value. The replay of the whole
			// history, with the value recorded, checks the rest.
			xm, ym := *x.Marker, *y.Marker
			xm.Value, ym.Value = nil, nil
			return reflect.DeepEqual(xm, ym)
		}
		xi, yi := x.Input, y.Input
		xr, yr := x.Result, y.Result
		x.Input, y.Input, x.Result, y.Result = nil, nil, nil, nil
		if !reflect.DeepEqual(x, y) || !wire.SameJSON(xi, yi) || !wire.SameJSON(xr, yr) {
			return false
		}
	}
	return true
}

func describeDecisions(ds []wire.Decision) string {
	raw, _ := json.Marshal(ds)
	return string(raw)
}

// checkIdentifier and checkJSON are ingest's checks of what Harvest can
// store: an empty identifier or document passes.
func checkIdentifier(s string) error {
	if s == "" {
		return nil
	}
	return storable.CheckIdentifier(s)
}

func checkJSON(raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	return storable.CheckJSON(raw)
}

// Update asks the execution for the update name with args (encoded as
// JSON), as POST /api/harvest/executions/{id}/updates/{name} does, runs
// the tasks that follow, and returns the update as it then stands:
// completed (its handler's Result) or failed (its handler's Failure), or
// accepted while its handler waits (Advance, then Execution.UpdateStatus).
// A refused update returns the API's error as a *client.APIError: 422
// update_rejected (client.ErrUpdateRejected), 404 update_not_found, 409
// execution_closed, 429 update_limit. opts is at most one UpdateOptions.
func (x *Execution) Update(ctx context.Context, name string, args any, opts ...UpdateOptions) (client.Update, error) {
	e := x.env
	raw, err := json.Marshal(args)
	if err != nil {
		return client.Update{}, fmt.Errorf("harvesttest: update %s: encode args: %w", name, err)
	}
	var key string
	if len(opts) > 0 {
		key = opts[0].IdempotencyKey
	}
	for field, err := range map[string]error{"idempotency_key": checkIdentifier(key), "args": checkJSON(raw)} {
		if err != nil {
			return client.Update{}, &client.APIError{StatusCode: http.StatusBadRequest, Code: client.CodePayloadUnstorable, Field: field,
				Message: fmt.Sprintf("%s %v", field, err)}
		}
	}
	id := dedup.NewID()
	if key != "" {
		id = dedup.UpdateCommandID(x.ID, key)
	}
	e.run.Lock()
	defer e.run.Unlock()
	e.mu.Lock()
	out, err := e.apply(ctx, &wire.Command{CommandID: id, Kind: wire.KindUpdate, Update: &wire.UpdateCommand{
		ExecutionID: x.ID, UpdateID: id, Name: name, Args: raw, IdempotencyKey: key}})
	e.mu.Unlock()
	if err != nil {
		return client.Update{}, err
	}
	if out.Error != "" {
		return client.Update{}, refused(out)
	}
	if err := e.drain(ctx); err != nil {
		return client.Update{}, err
	}
	u, err := x.UpdateStatus(out.UpdateID)
	u.Deduplicated = out.Deduplicated
	return u, err
}

// UpdateStatus reads update id as GET
// /api/harvest/executions/{id}/updates/{update_id} does, with the error
// Update returns for a refused one.
func (x *Execution) UpdateStatus(id string) (client.Update, error) {
	e := x.env
	e.mu.Lock()
	u, ok := e.mem.Update(id)
	e.mu.Unlock()
	if !ok {
		return client.Update{}, &client.APIError{StatusCode: http.StatusNotFound, Code: client.CodeUpdateNotFound, Message: "no update " + id}
	}
	view := u.View()
	if status, body, refused := view.Refusal(); refused {
		return view, &client.APIError{StatusCode: status, Code: body.Error, Message: body.Message}
	}
	return view, nil
}
