// Package harvest is a stub of the SDK's surface that the analyzer's test
// packages use: the analyzer knows the SDK by its import path, and trusts
// its code, so the bodies here do nothing.
package harvest

import (
	"log/slog"
	"time"
)

type WorkflowContext struct{}

func (c *WorkflowContext) Logger() *slog.Logger { return slog.Default() }

type ActivityContext struct{}

type Worker struct{}

func RegisterWorkflow[In, Out any](w *Worker, name string, fn func(ctx *WorkflowContext, in In) (Out, error)) {
}

func RegisterActivity[In, Out any](w *Worker, name string, fn func(ctx *ActivityContext, in In) (Out, error)) {
}

func Go(ctx *WorkflowContext, fn func(ctx *WorkflowContext)) {}

func SideEffect[T any](ctx *WorkflowContext, fn func() T) T { return fn() }

type Future struct{}

func (f *Future) Get(out any) error { return nil }

func ExecuteActivity(ctx *WorkflowContext, name string, input any) *Future { return &Future{} }

func Now(ctx *WorkflowContext) time.Time { return time.Time{} }

func Sleep(ctx *WorkflowContext, d time.Duration) {}

type Timer struct{}

func NewTimer(ctx *WorkflowContext, d time.Duration) *Timer { return &Timer{} }

func (t *Timer) Wait() {}

type Channel[T any] struct{}

func NewChannel[T any](ctx *WorkflowContext) *Channel[T] { return &Channel[T]{} }

func (c *Channel[T]) Send(ctx *WorkflowContext, v T) {}

func (c *Channel[T]) Receive(ctx *WorkflowContext) (v T, more bool) { return v, false }

type Selector struct{}

func NewSelector(ctx *WorkflowContext) *Selector { return &Selector{} }

type Signal[T any] struct{ Name string }

func NewSignal[T any](name string) Signal[T] { return Signal[T]{Name: name} }

func (s Signal[T]) Receive(ctx *WorkflowContext) (v T, err error) { return v, nil }
