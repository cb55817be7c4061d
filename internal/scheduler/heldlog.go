package scheduler

import (
	"context"
	"log/slog"
)

// heldLog is a slog handler that holds what is logged through it until
// release: a read-free attempt at a batch logs through one, so that an
// attempt given up (and the batch applied again, with reads) leaves no
// record of its own, and one that commits logs what it did once.
type heldLog struct {
	inner slog.Handler
	held  *[]heldRecord
}

type heldRecord struct {
	h slog.Handler
	r slog.Record
}

func newHeldLog(inner slog.Handler) (*slog.Logger, *[]heldRecord) {
	held := new([]heldRecord)
	return slog.New(heldLog{inner: inner, held: held}), held
}

func (h heldLog) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h heldLog) Handle(_ context.Context, r slog.Record) error {
	*h.held = append(*h.held, heldRecord{h: h.inner, r: r.Clone()})
	return nil
}

func (h heldLog) WithAttrs(as []slog.Attr) slog.Handler {
	return heldLog{inner: h.inner.WithAttrs(as), held: h.held}
}

func (h heldLog) WithGroup(name string) slog.Handler {
	return heldLog{inner: h.inner.WithGroup(name), held: h.held}
}

// release logs the held records, in order.
func release(ctx context.Context, held []heldRecord) {
	for _, x := range held {
		_ = x.h.Handle(ctx, x.r)
	}
}
