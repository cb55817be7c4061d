package scheduler

import (
	"encoding/json"
	"fmt"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Defaults for HistoryLimits' zero values
// (docs/reliability.md#history-limits).
const (
	DefaultHistoryWarnEvents    = 10_000
	DefaultHistoryWarnBytes     = 10 << 20
	DefaultHistoryMaxEvents     = 50_000
	DefaultHistoryMaxBytes      = 50 << 20
	DefaultHistorySuggestEvents = 4096
	DefaultHistorySuggestBytes  = 4 << 20
	// DefaultUpdateMaxInFlight and DefaultUpdateMaxPerRun bound a run's
	// updates (HistoryLimits.UpdateMaxInFlight, UpdateMaxPerRun).
	DefaultUpdateMaxInFlight = 10
	DefaultUpdateMaxPerRun   = 2000
)

// HistoryLimits are what an execution's history is held to, in events
// (its length) and in bytes (its size: the sum of its events' types' and
// attributes' lengths). Past a warning threshold the execution carries a
// warning (its view's history_warning, a metric); past a hard limit it
// fails with HistoryLimitExceeded; past a suggestion threshold its
// workflow tasks tell its code to continue as new
// (harvest.WorkflowInfo.ContinueAsNewSuggested).
//
// A zero field means its default; a threshold left zero is its default
// capped at the hard limit, so that lowering only the hard limit (a test's
// small limits) is enough.
//
// UpdateMaxInFlight and UpdateMaxPerRun bound a run's updates, which
// each add to its history and its workflow tasks: how many may be in
// flight (requested or accepted, not answered) at once, and how many a
// run may be asked for in all; past either, an update is refused with
// 429 update_limit (a run that continues as new starts counting anew).
type HistoryLimits struct {
	WarnEvents        int
	WarnBytes         int64
	MaxEvents         int
	MaxBytes          int64
	SuggestEvents     int
	SuggestBytes      int64
	UpdateMaxInFlight int
	UpdateMaxPerRun   int
}

// WithDefaults is l with its zero fields filled in.
func (l HistoryLimits) WithDefaults() HistoryLimits {
	if l.MaxEvents == 0 {
		l.MaxEvents = DefaultHistoryMaxEvents
	}
	if l.MaxBytes == 0 {
		l.MaxBytes = DefaultHistoryMaxBytes
	}
	if l.WarnEvents == 0 {
		l.WarnEvents = min(DefaultHistoryWarnEvents, l.MaxEvents)
	}
	if l.WarnBytes == 0 {
		l.WarnBytes = min(DefaultHistoryWarnBytes, l.MaxBytes)
	}
	if l.SuggestEvents == 0 {
		l.SuggestEvents = min(DefaultHistorySuggestEvents, l.MaxEvents)
	}
	if l.SuggestBytes == 0 {
		l.SuggestBytes = min(DefaultHistorySuggestBytes, l.MaxBytes)
	}
	if l.UpdateMaxInFlight == 0 {
		l.UpdateMaxInFlight = DefaultUpdateMaxInFlight
	}
	if l.UpdateMaxPerRun == 0 {
		l.UpdateMaxPerRun = DefaultUpdateMaxPerRun
	}
	return l
}

// Validate names the first bad field: each is positive (or zero, its
// default), and no threshold is above its hard limit.
func (l HistoryLimits) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"WarnEvents", int64(l.WarnEvents)}, {"WarnBytes", l.WarnBytes}, {"MaxEvents", int64(l.MaxEvents)},
		{"MaxBytes", l.MaxBytes}, {"SuggestEvents", int64(l.SuggestEvents)}, {"SuggestBytes", l.SuggestBytes},
		{"UpdateMaxInFlight", int64(l.UpdateMaxInFlight)}, {"UpdateMaxPerRun", int64(l.UpdateMaxPerRun)},
	} {
		if f.v < 0 {
			return fmt.Errorf("history limits: %s %d: want a positive number", f.name, f.v)
		}
	}
	d := l.WithDefaults()
	switch {
	case d.WarnEvents > d.MaxEvents:
		return fmt.Errorf("history limits: WarnEvents %d is above MaxEvents %d", d.WarnEvents, d.MaxEvents)
	case d.WarnBytes > d.MaxBytes:
		return fmt.Errorf("history limits: WarnBytes %d is above MaxBytes %d", d.WarnBytes, d.MaxBytes)
	case d.SuggestEvents > d.MaxEvents:
		return fmt.Errorf("history limits: SuggestEvents %d is above MaxEvents %d", d.SuggestEvents, d.MaxEvents)
	case d.SuggestBytes > d.MaxBytes:
		return fmt.Errorf("history limits: SuggestBytes %d is above MaxBytes %d", d.SuggestBytes, d.MaxBytes)
	}
	return nil
}

// eventBytes is what an event adds to its history's size.
func eventBytes(typ string, attrs []byte) int64 { return int64(len(typ) + len(attrs)) }

// suggestsContinueAsNew says whether e's history, as it stands, is past
// the suggestion threshold: what the workflow task dispatched now tells
// its code.
func (l HistoryLimits) suggestsContinueAsNew(e *store.Execution) bool {
	return e.LastSeq >= l.SuggestEvents || e.HistoryBytes >= l.SuggestBytes
}

// checkHistories holds the histories the batch appended to to the
// limits, once its commands and timers have been applied (and before its
// workflow tasks are dispatched): an execution whose history passed a
// warning threshold for the first time carries the warning from now on;
// a running one past a hard limit fails, HistoryLimitExceeded, in the
// batch's transaction. Failing takes one event more, so that an
// execution at its limit never stops its shard: however it got past it,
// it closes.
func (b *batch) checkHistories() {
	for id := range b.changed {
		e := b.execs[id]
		if e == nil {
			continue
		}
		l := b.limits
		if e.HistoryWarning == nil && (e.LastSeq >= l.WarnEvents || e.HistoryBytes >= l.WarnBytes) {
			e.HistoryWarning = &api.HistoryWarning{WarnEvents: l.WarnEvents, WarnBytes: l.WarnBytes, MaxEvents: l.MaxEvents, MaxBytes: l.MaxBytes}
			b.writes.HistoryCrossings.Warned++
			b.logFor(id).Warn("an execution's history passed its warning threshold", "events", e.LastSeq, "bytes", e.HistoryBytes,
				"warn_events", l.WarnEvents, "warn_bytes", l.WarnBytes, "max_events", l.MaxEvents, "max_bytes", l.MaxBytes)
		}
		if e.Status != wire.StatusRunning {
			continue
		}
		var what string
		switch {
		case e.LastSeq > l.MaxEvents:
			what = fmt.Sprintf("%d events, more than its limit of %d (history_max_events)", e.LastSeq, l.MaxEvents)
		case e.HistoryBytes > l.MaxBytes:
			what = fmt.Sprintf("%d bytes, more than its limit of %d (history_max_bytes)", e.HistoryBytes, l.MaxBytes)
		default:
			continue
		}
		b.failHistoryLimit(e, what)
	}
}

// historyLimitReason is the reason of the WorkflowFailed event of an
// execution failed for its history.
const historyLimitReason = "history limit exceeded"

// failHistoryLimit fails the running execution e, whose history is past
// its hard limit (what says which, with the numbers): its workflow task
// is no longer waited for, its running activities are told to stop, and
// its timers go with it.
func (b *batch) failHistoryLimit(e *store.Execution, what string) {
	f := wire.Failure{Type: api.FailureHistoryLimitExceeded, NonRetryable: true,
		Message: fmt.Sprintf("the execution's history has %s: a workflow that runs this long continues as new before its limit", what)}
	b.logFor(e.ExecutionID).Error("failing an execution whose history is past its limit", "events", e.LastSeq, "bytes", e.HistoryBytes,
		"max_events", b.limits.MaxEvents, "max_bytes", b.limits.MaxBytes)
	e.WFTOutstanding, e.WFTDirty = false, false
	e.TaskFailing = nil
	e.Error, _ = json.Marshal(f)
	// The reason tells a replay that no decision recorded this event
	// (decide.Imposed).
	b.close(e, wire.StatusFailed, wire.EventWorkflowFailed, wire.WorkflowClosedAttrs{Failure: &f, Reason: historyLimitReason})
	b.stopActivities(e, "historylimit:", f.Message)
	b.writes.HistoryCrossings.Exceeded++
}
