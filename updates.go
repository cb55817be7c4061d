package harvest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Updates: a request a running workflow answers
// (docs/long-workflows.md#updating-a-running-workflow).
//
// A client asks for an update (POST
// /api/harvest/executions/{id}/updates/{name}); the execution's next
// workflow task carries it. Once the task has run the workflow code over
// the history until it blocks, it delivers each update it carries: the
// handler's validator, if any, runs first, and may refuse it (the update
// is answered update_rejected and nothing of it goes in the history);
// otherwise the update is accepted, recorded in the history with its
// arguments (WorkflowUpdateAccepted), and its handler starts as a
// coroutine of the workflow, which may wait on activities, timers and
// signals as any of them does. Its return is recorded
// (WorkflowUpdateCompleted) and answers the update. A replay delivers
// each accepted update again at the point the history records, so that
// the handler runs, and the workflow sees it, as the first time.

// UpdateOptions configure an update handler.
type UpdateOptions struct {
	// Validator, when set, checks an update before it is accepted: a
	// func(*harvest.WorkflowContext, A) error or a func(A) error, A being
	// the handler's argument type. An error refuses the update (422
	// update_rejected, its message the error's); nothing of it is then
	// recorded. It may read the workflow's state but not change it, nor
	// make any workflow call that blocks or decides (run an activity,
	// sleep, send a signal): one that does refuses the update.
	Validator any
}

// ErrUpdateHandler is returned (wrapped) by SetUpdateHandler for a
// handler it cannot register: a name that is not valid, or a validator
// of the wrong type.
var ErrUpdateHandler = errors.New("harvest: invalid update handler")

// updateHandler is a registered update handler, its types erased.
type updateHandler struct {
	// validate decodes args and runs the validator, if any.
	validate func(ctx *WorkflowContext, args json.RawMessage) error
	// run decodes args and runs the handler.
	run func(ctx *WorkflowContext, args json.RawMessage) (any, error)
}

// updateState is what an execution knows of its updates.
type updateState struct {
	handlers map[string]*updateHandler
	// delivered are the updates delivered to the code (accepted), by id.
	delivered map[string]bool
	// rejections are the updates the task at hand refused.
	rejections []wire.UpdateRejection
	// validating says a validator runs: a workflow call that decides is
	// refused.
	validating bool
}

// SetUpdateHandler registers fn as the handler of the updates named name
// the workflow is asked for. Register handlers before the workflow first
// blocks, so that an update that arrives early finds its handler: a
// workflow task refuses (404 update_not_found) an update whose name has
// no handler once the code has blocked. Registering a name again
// replaces its handler.
//
// fn runs as a coroutine of the workflow, once per update, with the
// update's arguments decoded into A; it may make every workflow call
// (ExecuteActivity, Sleep, Await, ...), and its return answers the update:
// R as JSON, or its error as the update's failure. The workflow goes on
// meanwhile. An update still running when the workflow returns fails
// with execution_closed.
func SetUpdateHandler[A, R any](ctx *WorkflowContext, name string, fn func(ctx *WorkflowContext, args A) (R, error), opts ...UpdateOptions) error {
	if err := dedup.ValidateName(name); err != nil {
		return fmt.Errorf("%w: name: %w", ErrUpdateHandler, err)
	}
	if fn == nil {
		return fmt.Errorf("%w %q: no function", ErrUpdateHandler, name)
	}
	var validate func(*WorkflowContext, A) error
	if len(opts) > 0 && opts[0].Validator != nil {
		switch v := opts[0].Validator.(type) {
		case func(*WorkflowContext, A) error:
			validate = v
		case func(A) error:
			validate = func(_ *WorkflowContext, a A) error { return v(a) }
		default:
			var a A
			return fmt.Errorf("%w %q: its validator is a %T, want a func(*harvest.WorkflowContext, %T) error or a func(%T) error",
				ErrUpdateHandler, name, opts[0].Validator, a, a)
		}
	}
	decode := func(raw json.RawMessage) (A, error) {
		var a A
		if len(raw) == 0 {
			return a, nil
		}
		if err := json.Unmarshal(raw, &a); err != nil {
			return a, fmt.Errorf("decode the arguments of update %q: %w", name, err)
		}
		return a, nil
	}
	x := ctx.x
	if x.updates.handlers == nil {
		x.updates.handlers = map[string]*updateHandler{}
	}
	x.updates.handlers[name] = &updateHandler{
		validate: func(ctx *WorkflowContext, raw json.RawMessage) error {
			a, err := decode(raw)
			if err != nil || validate == nil {
				return err
			}
			return validate(ctx, a)
		},
		run: func(ctx *WorkflowContext, raw json.RawMessage) (any, error) {
			a, err := decode(raw)
			if err != nil {
				return nil, err
			}
			return fn(ctx, a)
		},
	}
	return nil
}

// deliverUpdates delivers the updates task carries to the code, once it
// has run over the history: each is validated, then accepted (its
// handler starts and runs until it blocks) or refused. Nothing is
// delivered once the workflow has returned: the updates stay in flight,
// for the run the workflow continued as, or to fail as it closes.
func (x *execution) deliverUpdates(task *wire.WorkflowTask) error {
	x.updates.rejections = nil
	for _, u := range task.Updates {
		if x.returned || x.failed != nil {
			break
		}
		if x.updates.delivered[u.UpdateID] {
			continue // accepted by a task this execution ran; not taken
		}
		h := x.updates.handlers[u.Name]
		if h == nil {
			x.updates.rejections = append(x.updates.rejections, wire.UpdateRejection{UpdateID: u.UpdateID, Reason: wire.UpdateRejectedUnknown,
				Failure: &wire.Failure{Type: "UnknownUpdate", Message: fmt.Sprintf("workflow %s has no handler for update %q", x.info.WorkflowName, u.Name)}})
			continue
		}
		if err := x.validateUpdate(h, u.Args); err != nil {
			x.updates.rejections = append(x.updates.rejections, wire.UpdateRejection{UpdateID: u.UpdateID, Reason: wire.UpdateRejectedByValidator,
				Failure: failureOf(err)})
			continue
		}
		if err := x.startUpdate(h, u); err != nil {
			return err
		}
	}
	return x.failed
}

// validateUpdate runs h's validator over args, outside the coroutines: a
// panic, or a workflow call that would block or decide, refuses the
// update.
func (x *execution) validateUpdate(h *updateHandler, args json.RawMessage) (err error) {
	x.updates.validating = true
	defer func() {
		x.updates.validating = false
		if p := recover(); p != nil {
			err = fmt.Errorf("the update's validator panicked: %v", p)
		}
	}()
	return h.validate(&WorkflowContext{x: x}, args)
}

// startUpdate accepts update u for h: the accept_update decision, then
// h's coroutine, run with the others until they all block.
func (x *execution) startUpdate(h *updateHandler, u wire.UpdateRequest) error {
	if x.updates.delivered == nil {
		x.updates.delivered = map[string]bool{}
	}
	x.updates.delivered[u.UpdateID] = true
	x.decide(wire.Decision{Type: wire.DecisionAcceptUpdate, Update: &wire.UpdateAttrs{UpdateID: u.UpdateID, Name: u.Name, Args: u.Args}})
	ctx := &WorkflowContext{x: x}
	x.d.spawn("update "+u.Name, func() {
		res, err := h.run(ctx, u.Args)
		answer := &wire.UpdateAttrs{UpdateID: u.UpdateID}
		if err == nil {
			raw, merr := json.Marshal(res)
			if merr == nil {
				// Refused here, as SideEffect's values are, rather than
				// as a workflow task result the scheduler cannot record.
				merr = storable.CheckJSON(raw)
			}
			if merr != nil {
				err = fmt.Errorf("encode the result of update %q: %w", u.Name, merr)
			} else {
				answer.Result = raw
			}
		}
		if err != nil {
			answer.Failure = storableFailure(failureOf(err))
		}
		x.decide(wire.Decision{Type: wire.DecisionCompleteUpdate, Update: answer})
	})
	x.d.run()
	if p := x.d.panicked; p != nil {
		return x.diverged(&workflowPanic{workflow: x.info.WorkflowName, failure: p})
	}
	return nil
}

// storableFailure is f with what PostgreSQL cannot store in its texts (a
// NUL, bytes that are not UTF-8) replaced, so that an update's failure
// is recorded rather than its workflow task set aside.
func storableFailure(f *wire.Failure) *wire.Failure {
	clean := func(s string) string {
		return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	}
	f.Message, f.Type, f.Stack = clean(f.Message), clean(f.Type), clean(f.Stack)
	return f
}

// replayUpdate delivers again, as a replay meets its
// WorkflowUpdateAccepted event ev, the update a task accepted there: its
// accept_update decision and what its handler then decided join those
// the history is matched against. An update this execution delivered
// itself (the task it ran last) is not delivered twice.
func (x *execution) replayUpdate(ev wire.Event) error {
	var a wire.UpdateAttrs
	if err := json.Unmarshal(ev.Attrs, &a); err != nil {
		return fmt.Errorf("history event %d: %w", ev.Seq, err)
	}
	if x.updates.delivered[a.UpdateID] {
		return nil
	}
	if len(x.expect) > 0 {
		// The code decided something the history does not have before
		// the update: the match says so.
		return nil
	}
	h := x.updates.handlers[a.Name]
	if h == nil {
		return x.diverged(&NonDeterminismError{TaskID: x.blockTask, Seq: ev.Seq, History: describeEvent(ev),
			Code: fmt.Sprintf("no handler for update %q", a.Name)})
	}
	if err := x.startUpdate(h, wire.UpdateRequest{UpdateID: a.UpdateID, Name: a.Name, Args: a.Args}); err != nil {
		return err
	}
	x.expect = append(x.expect, x.takeDecisions()...)
	return nil
}
