package logattr_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// logRecord is one record a stack logged, with its logger's attributes
// (With) and its own, flattened to strings.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (r logRecord) String() string {
	keys := make([]string, 0, len(r.attrs))
	for k := range r.attrs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q", r.level, r.msg)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%q", k, r.attrs[k])
	}
	return b.String()
}

// recordLog is a slog.Handler that keeps every record, at every level, as
// a logRecord, and hands it on to next (the test's log, printed if it
// fails).
type recordLog struct {
	mu     *sync.Mutex
	recs   *[]logRecord
	attrs  []slog.Attr
	prefix string
	next   slog.Handler
}

func newRecordLog(next slog.Handler) *recordLog {
	return &recordLog{mu: new(sync.Mutex), recs: new([]logRecord), next: next}
}

func (h *recordLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordLog) Handle(ctx context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	add := func(prefix string, a slog.Attr) {
		rec.attrs[prefix+a.Key] = a.Value.Resolve().String()
	}
	for _, a := range h.attrs {
		add("", a)
	}
	r.Attrs(func(a slog.Attr) bool { add(h.prefix, a); return true })
	h.mu.Lock()
	*h.recs = append(*h.recs, rec)
	h.mu.Unlock()
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *recordLog) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = slices.Clip(h.attrs)
	for _, a := range as {
		a.Key = h.prefix + a.Key
		c.attrs = append(c.attrs, a)
	}
	c.next = h.next.WithAttrs(as)
	return &c
}

func (h *recordLog) WithGroup(name string) slog.Handler {
	c := *h
	c.prefix = h.prefix + name + "."
	c.next = h.next.WithGroup(name)
	return &c
}

// records returns what was logged so far.
func (h *recordLog) records() []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(*h.recs)
}

// aboutExecution says whether a record is about one execution: it has an
// attribute only such a line has, or its message says so.
var aboutExecution = regexp.MustCompile(`\b(execution|activity|workflow task|signal|history event|command applied|callback)\b`)

func isAboutExecution(r logRecord) bool {
	for _, k := range []string{"execution_id", "command_id", "activity", "activity_id", "task_id"} {
		if _, ok := r.attrs[k]; ok {
			return true
		}
	}
	return aboutExecution.MatchString(r.msg)
}

// TestLogLinesCarryTheExecution drives a stack through a start, a signal,
// an activity that fails once and is retried, one that fails for good, and
// a cancellation, with every process logging at debug level into one
// handler that keeps the records, and checks that every record about an
// execution names it and its workflow (and the command in hand, under the
// same keys everywhere), so that grep of an execution id tells its story
// across ingest, the scheduler and the worker.
func TestLogLinesCarryTheExecution(t *testing.T) {
	t.Parallel()
	logs := newRecordLog(stacktest.Logger(t).Handler())
	goSignal := harvest.NewSignal[struct{}]("go")
	s := stacktest.Start(t, devstack.Config{Logger: slog.New(logs), Register: func(w *harvest.Worker) {
		retry := harvest.ActivityOptions{RetryPolicy: harvest.RetryExponential(3, 50*time.Millisecond)}
		harvest.RegisterActivity(w, "logstory_flaky", func(ctx *harvest.ActivityContext, _ struct{}) (string, error) {
			if ctx.Attempt() == 1 {
				return "", errors.New("provider unavailable")
			}
			return "ok", nil
		}, retry)
		harvest.RegisterActivity(w, "logstory_declined", func(*harvest.ActivityContext, struct{}) (string, error) {
			return "", harvest.NewNonRetryableError("Declined", "card declined")
		}, retry)
		harvest.RegisterWorkflow(w, "logstory", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			if _, err := goSignal.Receive(ctx); err != nil {
				return "", err
			}
			var out string
			if err := harvest.ExecuteActivity(ctx, "logstory_flaky", nil).Get(&out); err != nil {
				return "", err
			}
			var ae *harvest.ActivityError
			if err := harvest.ExecuteActivity(ctx, "logstory_declined", nil).Get(nil); !errors.As(err, &ae) {
				return "", fmt.Errorf("logstory_declined: want an activity error, got %v", err)
			}
			return out, nil
		})
	}})

	a := stacktest.StartWorkflow(t, s, "logstory", "", `{}`)
	require.Equal(t, 201, a.Status, a.Body)
	story := a.Body["execution_id"].(string)
	r := stacktest.Signal(t, s, story, "go", "", "", `{}`)
	require.Equal(t, 202, r.Status, r.Body)
	require.Equal(t, "ok", stacktest.WaitCompleted(t, s, story)["result"])

	b := stacktest.StartWorkflow(t, s, "logstory", "", `{}`)
	require.Equal(t, 201, b.Status, b.Body)
	cancelled := b.Body["execution_id"].(string)
	c := stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+cancelled+"/cancel", nil, `{"reason": "log test"}`)
	require.Equal(t, 200, c.Status, c.Body)
	stacktest.WaitStatus(t, s, cancelled, "Cancelled")

	recs := logs.records()
	// Every record about an execution names it and its workflow.
	about := 0
	for _, rec := range recs {
		if !isAboutExecution(rec) {
			continue
		}
		about++
		require.NotEmpty(t, rec.attrs["execution_id"], "a line about an execution without execution_id: %s", rec)
		require.NotEmpty(t, rec.attrs["workflow"], "a line about an execution without workflow: %s", rec)
		require.NotEmpty(t, rec.attrs["service"], "a line without its service: %s", rec)
	}
	require.NotZero(t, about)

	// Each execution's lines, and the services that logged them.
	of := func(id string) []logRecord {
		var out []logRecord
		for _, rec := range recs {
			if rec.attrs["execution_id"] == id {
				require.Equal(t, "logstory", rec.attrs["workflow"], "%s", rec)
				out = append(out, rec)
			}
		}
		return out
	}
	services := func(rs []logRecord) []string {
		var out []string
		for _, rec := range rs {
			if !slices.Contains(out, rec.attrs["service"]) {
				out = append(out, rec.attrs["service"])
			}
		}
		slices.Sort(out)
		return out
	}
	find := func(rs []logRecord, service, msg string, attrs map[string]string) []logRecord {
		var out []logRecord
	next:
		for _, rec := range rs {
			if rec.attrs["service"] != service || rec.msg != msg {
				continue
			}
			for k, v := range attrs {
				if rec.attrs[k] != v {
					continue next
				}
			}
			out = append(out, rec)
		}
		return out
	}

	lines := of(story)
	require.Equal(t, []string{"ingest", "scheduler", "worker"}, services(lines), "one execution's lines come from every process")
	// Ingest tells which command became which execution, and so does the
	// scheduler, under the same command id.
	for _, kind := range []string{"start", "signal"} {
		in := find(lines, "ingest", "command applied", map[string]string{"kind": kind})
		require.Len(t, in, 1, "ingest's %s", kind)
		require.NotEmpty(t, in[0].attrs["command_id"])
		require.NotEmpty(t, find(lines, "scheduler", "command applied", map[string]string{"kind": kind, "command_id": in[0].attrs["command_id"]}),
			"the scheduler's line of ingest's %s", in[0])
	}
	require.NotEmpty(t, find(lines, "scheduler", "history event", map[string]string{"event": "SignalReceived"}))
	require.NotEmpty(t, find(lines, "scheduler", "history event", map[string]string{"event": "WorkflowCompleted"}))
	// The worker's failed attempt and the scheduler's retry of it name the
	// activity, the attempt and the command that carried the failure.
	failed := find(lines, "worker", "activity failed", map[string]string{"activity": "logstory_flaky", "attempt": "1"})
	require.Len(t, failed, 1)
	require.NotEmpty(t, failed[0].attrs["command_id"])
	require.NotEmpty(t, failed[0].attrs["activity_id"])
	require.Len(t, find(lines, "scheduler", "activity attempt failed; retrying", map[string]string{
		"activity": "logstory_flaky", "attempt": "1", "command_id": failed[0].attrs["command_id"], "activity_id": failed[0].attrs["activity_id"],
	}), 1, "the scheduler's retry of %s", failed[0])
	require.NotEmpty(t, find(lines, "worker", "activity attempt ended", map[string]string{"activity": "logstory_flaky", "attempt": "2", "outcome": "completed"}))
	require.Len(t, find(lines, "scheduler", "history event", map[string]string{"event": "ActivityCompleted", "activity": "logstory_flaky", "attempt": "2"}), 1)
	require.Len(t, find(lines, "scheduler", "history event", map[string]string{"event": "ActivityFailed", "activity": "logstory_declined", "failure": "Declined"}), 1)
	require.NotEmpty(t, find(lines, "worker", "activity failed", map[string]string{"activity": "logstory_declined", "attempt": "1"}))
	require.NotEmpty(t, find(lines, "worker", "workflow task completed", nil))

	lines = of(cancelled)
	require.Len(t, find(lines, "ingest", "command applied", map[string]string{"kind": "cancel", "status": "Running"}), 1)
	require.Len(t, find(lines, "scheduler", "history event", map[string]string{"event": "WorkflowCancelRequested"}), 1)
	require.Len(t, find(lines, "scheduler", "history event", map[string]string{"event": "WorkflowCancelled"}), 1)
}
