package harvest

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/harvest-engine/harvest/harvesttype"
	"github.com/harvest-engine/harvest/internal/inproc"
	"github.com/harvest-engine/harvest/internal/schema"
	"github.com/harvest-engine/harvest/internal/workerrt"
)

// This file is the test kit's way in to a Worker (package harvesttest),
// named for who uses it: none of it runs in a worker a deployment runs.

// BindTestKit is not for workers' code: it is how package harvesttest
// runs a worker's registrations in process, with no NATS server. It calls
// register with a Worker bound to nothing, and returns its registrations
// bound to the handlers a started Worker runs its tasks with (the same
// replay of workflow code, the same reconcile-then-activity attempt). A
// refused registration is returned as Worker.Start returns it, matching
// ErrRegistration. Of cfg, the worker takes its Logger and its
// WorkflowCacheSize. Use harvesttest.New.
func BindTestKit(cfg WorkerConfig, register func(*Worker)) (harvesttype.TestKitWorker, error) {
	w := newWorker(WorkerConfig{Logger: cfg.Logger, WorkflowCacheSize: cfg.WorkflowCacheSize}.WithDefaults())
	register(w)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := errors.Join(w.regErrs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRegistration, err)
	}
	w.started = true
	return testKitWorker{w}, nil
}

// testKitWorker is a Worker as BindTestKit hands it to the test kit. Its
// exported methods beyond harvesttype.TestKitWorker's name internal
// types: the test kit reaches them through inproc.Worker, which a user's
// code cannot import.
type testKitWorker struct{ w *Worker }

var _ inproc.Worker = testKitWorker{}

// Workflows are the names of the workflows registered, sorted.
func (b testKitWorker) Workflows() []string {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	return slices.Sorted(maps.Keys(b.w.workflows))
}

// Schema is the input schema of workflow, nil without one.
func (b testKitWorker) Schema(workflow string) *schema.Schema {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	return b.w.schemas[workflow]
}

// Handlers are what a worker's runtime runs the registrations' tasks
// with.
func (b testKitWorker) Handlers() workerrt.Handlers { return b.w.handlers() }

// ReplaceActivity makes fn the activity name (registered or not).
func (b testKitWorker) ReplaceActivity(name string, fn any) error {
	return b.w.replaceActivity(name, fn)
}

// Close ends the executions kept in memory between workflow tasks.
func (b testKitWorker) Close() { b.w.cache.close() }

// replaceActivity makes fn the activity name (registered or not), for
// the test kit's OnActivity. fn has an activity's form:
// func(*ActivityContext, In) (Out, error).
func (w *Worker) replaceActivity(name string, fn any) error {
	v := reflect.ValueOf(fn)
	t := reflect.TypeOf(fn)
	if t == nil || t.Kind() != reflect.Func || t.NumIn() != 2 || t.In(0) != reflect.TypeFor[*ActivityContext]() ||
		t.NumOut() != 2 || !t.Out(1).Implements(reflect.TypeFor[error]()) {
		return fmt.Errorf("activity %q: %T is not an activity: want func(*harvest.ActivityContext, In) (Out, error)", name, fn)
	}
	in := t.In(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.activities[name] = func(ctx *ActivityContext, raw json.RawMessage) (any, error) {
		arg := reflect.New(in)
		if len(raw) > 0 && string(raw) != "null" {
			if err := json.Unmarshal(raw, arg.Interface()); err != nil {
				return nil, NonRetryable(fmt.Errorf("decode input: %w", err))
			}
		}
		out := v.Call([]reflect.Value{reflect.ValueOf(ctx), arg.Elem()})
		err, _ := out[1].Interface().(error)
		return out[0].Interface(), err
	}
	return nil
}
