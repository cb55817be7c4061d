package decide_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/decide"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestEveryWireDecisionHasAKind: every Decision… constant package wire
// declares is a kind decide knows, and the other way round, so that a
// decision cannot be added to the wire without saying what it means.
func TestEveryWireDecisionHasAKind(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "wire", "*.go"))
	require.NoError(t, err)
	var declared []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, id := range spec.Names {
				if !strings.HasPrefix(id.Name, "Decision") || i >= len(spec.Values) {
					continue
				}
				lit, ok := spec.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				declared = append(declared, v)
			}
			return true
		})
	}
	require.NotEmpty(t, declared)
	require.ElementsMatch(t, declared, decide.Kinds())
}

// An activity's key is derived from the execution and the activity's id:
// every side that records or dispatches it hands the same key.
func TestAnActivityKeepsItsKeyWhereverItIsRecorded(t *testing.T) {
	t.Parallel()
	d := wire.Decision{Type: wire.DecisionScheduleActivity, ActivityID: 3, ActivityName: "charge", Input: json.RawMessage(`{}`)}
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	a, err := decide.Record(decide.KeysOf("e1", nil), &d, now)
	require.NoError(t, err)
	b, err := decide.Record(decide.KeysOf("e1", nil), &d, now.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, a.Activity.Key, b.Activity.Key)
	c, err := decide.Record(decide.KeysOf("e2", nil), &d, now)
	require.NoError(t, err)
	require.NotEqual(t, a.Activity.Key, c.Activity.Key)

	at := decide.Attempt{ExecutionID: "e1", TaskQueue: "default", Activity: *a.Activity, Number: 2, ScheduledAt: now}
	require.Equal(t, a.Activity.Key, at.Task(now.Add(time.Minute)).IdempotencyKey)
}

// An attempt's deadline is its start-to-close timeout from its dispatch,
// bounded by the activity's schedule-to-close timeout from its
// scheduling.
func TestAnAttemptEndsAtTheEarlierOfItsTimeouts(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	opts := wire.ActivityOptions{StartToCloseMS: 60_000, ScheduleToCloseMS: 90_000}
	at := decide.Attempt{ExecutionID: "e1", Activity: decide.Activity{ID: 1, Name: "a", Options: opts}, Number: 1, ScheduledAt: now}
	require.Equal(t, now.Add(time.Minute), at.Task(now).Deadline)
	require.Equal(t, now.Add(90*time.Second), at.Task(now.Add(time.Minute)).Deadline, "schedule-to-close bounds a later attempt")
}

// A decision the replayer meets is matched only by the event of its own
// kind with its own name, input and result; an unknown one by nothing.
func TestMatchesTellsDecisionsApart(t *testing.T) {
	t.Parallel()
	now := time.Now()
	act := wire.Decision{Type: wire.DecisionScheduleActivity, ActivityID: 1, ActivityName: "charge", Input: json.RawMessage(`{"a":1}`)}
	rec, err := decide.Record(decide.KeysOf("e1", nil), &act, now)
	require.NoError(t, err)
	raw, err := json.Marshal(rec.Attrs)
	require.NoError(t, err)
	ev := wire.Event{Seq: 3, Type: rec.Event, Attrs: raw}
	require.True(t, decide.Matches(&act, ev))
	other := act
	other.Input = json.RawMessage(`{"a":2}`)
	require.False(t, decide.Matches(&other, ev), "another input")
	timer := wire.Decision{Type: wire.DecisionStartTimer, TimerID: 1, DurationMS: 5}
	require.False(t, decide.Matches(&timer, ev), "another kind")
	require.False(t, decide.Matches(&wire.Decision{Type: "launch_rocket"}, ev))
	_, err = decide.Record(decide.KeysOf("e1", nil), &wire.Decision{Type: "launch_rocket"}, now)
	require.Error(t, err)
	_, err = decide.Record(decide.KeysOf("e1", nil), &wire.Decision{Type: wire.DecisionRecordMarker}, now)
	require.Error(t, err, "a marker decision without its marker")
	require.True(t, decide.IsDecisionEvent(wire.EventTimerStarted))
	require.False(t, decide.IsDecisionEvent(wire.EventWorkflowTaskCompleted))
}
