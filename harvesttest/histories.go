package harvesttest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/wire"
)

// ReplayHistories replays every history under dir, as `harvest workflow
// histories export` wrote them from a deployment, on the workflow code
// register registers, as a worker of that code would replay them at the
// execution's next workflow task: every decision the history records is
// checked against what the code decides. Each history that diverges
// fails t with the file, the execution, and where it diverged (the event,
// what the history has, what the code asked for). Run it in CI before a
// deploy: a change that would wedge running executions fails there, not
// in production.
//
// A history of a workflow register does not register is left out (and
// logged); a dir with no history fails t, so that an export that went
// wrong is not a pass.
func ReplayHistories(t testing.TB, register func(*harvest.Worker), dir string) {
	t.Helper()
	r, err := ReplayHistoryDir(register, dir)
	if err != nil {
		t.Fatalf("harvesttest: replay histories: %v", err)
	}
	for _, path := range r.Skipped {
		t.Logf("%s: its workflow is not registered here: left out", path)
	}
	for _, err := range r.Divergences {
		t.Error(err)
	}
	if r.Replayed == 0 {
		t.Errorf("harvesttest: replay histories: no history under %s of a workflow the code registers", dir)
	}
}

// HistoryReplay is what ReplayHistoryDir found.
type HistoryReplay struct {
	// Replayed counts the histories replayed.
	Replayed int
	// Skipped are the files of workflows the code does not register.
	Skipped []string
	// Divergences hold one error per history that does not replay, or
	// cannot be read, naming its file and execution; each replay error
	// matches harvest.ErrNonDeterministic, and where the replay diverged
	// a *harvest.NonDeterminismError says at which event, what the
	// history has and what the code asked for.
	Divergences []error
}

// ReplayHistoryDir is ReplayHistories for a caller that reports the
// divergences itself: it replays every history under dir on the code
// register registers. Its error is for a dir or a code it cannot use at
// all.
func ReplayHistoryDir(register func(*harvest.Worker), dir string) (HistoryReplay, error) {
	var r HistoryReplay
	b, err := bind(harvest.WorkerConfig{Logger: slog.New(slog.DiscardHandler)}, register)
	if err != nil {
		return r, err
	}
	defer b.Close()
	var files []string
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".json") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		return r, err
	}
	slices.Sort(files)
	for _, path := range files {
		f, task, err := readHistory(path)
		if err != nil {
			r.Divergences = append(r.Divergences, fmt.Errorf("%s: %w", path, err))
			continue
		}
		run, ok := b.Handlers().Workflow(f.WorkflowName)
		if !ok {
			r.Skipped = append(r.Skipped, path)
			continue
		}
		r.Replayed++
		if _, err := run(task); err != nil {
			if !errors.Is(err, harvest.ErrNonDeterministic) {
				err = fmt.Errorf("%w: %w", harvest.ErrNonDeterministic, err)
			}
			r.Divergences = append(r.Divergences, fmt.Errorf("%s: execution %s (%s %s, %s): %w", path, f.ExecutionID, f.WorkflowName, f.WorkflowID, f.Status, err))
		}
	}
	return r, nil
}

// readHistory reads an exported history, as the workflow task a worker
// would run next over it.
func readHistory(path string) (*api.ExportedHistory, *wire.WorkflowTask, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var f api.ExportedHistory
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, nil, fmt.Errorf("not an exported history: %w", err)
	}
	if f.ExecutionID == "" || f.WorkflowName == "" || len(f.History) == 0 {
		return nil, nil, errors.New("not an exported history: execution_id, workflow_name and history are required")
	}
	history := make([]wire.Event, 0, len(f.History))
	for i, apiEvent := range f.History {
		ev, err := wireEvent(apiEvent.Raw)
		if err != nil {
			return nil, nil, fmt.Errorf("history event %d: %w", i+1, err)
		}
		history = append(history, ev)
	}
	task := wire.ReplayTask(f.ExecutionID, f.WorkflowName, f.WorkflowID, f.TaskQueue, history)
	return &f, task, nil
}

// wireEvent is an event as the history route answers it (its attributes
// beside seq, type and at) in the form workers replay.
func wireEvent(raw json.RawMessage) (wire.Event, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return wire.Event{}, err
	}
	var ev wire.Event
	if err := json.Unmarshal(members["seq"], &ev.Seq); err != nil {
		return wire.Event{}, fmt.Errorf("seq: %w", err)
	}
	if err := json.Unmarshal(members["type"], &ev.Type); err != nil {
		return wire.Event{}, fmt.Errorf("type: %w", err)
	}
	if at, ok := members["at"]; ok {
		if err := json.Unmarshal(at, &ev.At); err != nil {
			return wire.Event{}, fmt.Errorf("at: %w", err)
		}
	}
	delete(members, "seq")
	delete(members, "type")
	delete(members, "at")
	attrs, err := json.Marshal(members)
	if err != nil {
		return wire.Event{}, err
	}
	ev.Attrs = attrs
	return ev, nil
}
