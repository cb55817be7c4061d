package harvest

import (
	"errors"
	"fmt"
	"log/slog"
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
	b.Schemas = w.schemas
	b.Workflows = b.Workflows[:0]
	for name := range w.workflows {
		b.Workflows = append(b.Workflows, name)
	}
	slices.Sort(b.Workflows)
	return nil
}
