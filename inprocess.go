package harvest

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"

	"github.com/harvest-engine/harvest/internal/inproc"
)

// BindInProcess is not for workers' code: it is how package harvesttest
// runs registrations in process, with no NATS server. It calls register
// with a Worker bound to nothing, then fills b with the handlers a
// started Worker runs its tasks with (the same replay of workflow code,
// the same reconcile-then-activity attempt), the workflows registered
// and their input schemas. b's type is internal to this module. Use
// harvesttest.New.
func BindInProcess(b *inproc.Binding, logger *slog.Logger, register func(*Worker)) error {
	if b == nil {
		return errors.New("bind in process: no binding")
	}
	w := newWorker(WorkerConfig{Logger: logger}.withDefaults())
	register(w)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := errors.Join(w.regErrs...); err != nil {
		return fmt.Errorf("%w: %w", ErrRegistration, err)
	}
	w.started = true
	b.Handlers = w.handlers()
	b.Close = w.cache.close
	b.Replace = w.replaceActivity
	b.Schemas = w.schemas
	b.Workflows = b.Workflows[:0]
	for name := range w.workflows {
		b.Workflows = append(b.Workflows, name)
	}
	slices.Sort(b.Workflows)
	return nil
}

// replaceActivity makes fn the activity name (registered or not), for
// the test kit's OnActivity. fn has an activity's form:
// func(*ActivityContext, In) (Out, error).
func (w *Worker) replaceActivity(name string, fn any) error {
	v := reflect.ValueOf(fn)
	t := v.Type()
	if t.Kind() != reflect.Func || t.NumIn() != 2 || t.In(0) != reflect.TypeFor[*ActivityContext]() ||
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
