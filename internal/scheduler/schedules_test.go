package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/wire"
)

// putSchedule applies a put of schedule id to m at now.
func putSchedule(t *testing.T, m *Memory, now time.Time, id string, req api.ScheduleRequest) {
	t.Helper()
	d, err := m.Apply(t.Context(), now, &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindSchedule,
		Schedule: &wire.ScheduleCommand{ScheduleID: id, Op: wire.ScheduleOpPut, Definition: &req, Source: wire.ScheduleSourceAPI}})
	require.NoError(t, err)
	require.Len(t, d.Outcomes, 1)
	require.Empty(t, d.Outcomes[0].Error, d.Outcomes[0].Message)
}

// fireUntilDone fires m's due schedules at now until none is due, and
// returns the commands they sent.
func fireUntilDone(t *testing.T, m *Memory, now time.Time) []*wire.Command {
	t.Helper()
	var cmds []*wire.Command
	for {
		next, ok := m.NextTimer()
		if !ok || next.After(now) {
			return cmds
		}
		d, err := m.FireDue(t.Context(), now)
		require.NoError(t, err)
		cmds = append(cmds, d.Commands...)
	}
}

func countOutcomes(m *Memory, id string) map[string]int {
	_, fires, _ := m.Schedule(id)
	out := map[string]int{}
	for _, f := range fires {
		out[f.Outcome]++
	}
	return out
}

func TestFiresMissedBeyondTheCatchupWindowAreRecordedNotRun(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m, err := NewMemory(MemoryConfig{})
	require.NoError(t, err)
	putSchedule(t, m, t0, "ten", api.ScheduleRequest{Workflow: "tick", TaskQueue: "default", Spec: api.ScheduleSpec{Every: "10m"}, Overlap: api.OverlapAllowAll})
	// The shard comes back three hours later: the times within the last
	// hour fire (02:00 to 03:00, seven), the eleven before are missed.
	cmds := fireUntilDone(t, m, t0.Add(3*time.Hour))
	require.Equal(t, map[string]int{"starting": 7, "missed_catchup": 11}, countOutcomes(m, "ten"))
	require.Len(t, cmds, 7)
	for _, c := range cmds {
		require.Equal(t, wire.KindStart, c.Kind)
		require.NotNil(t, c.Start.Parent.Schedule)
		require.Equal(t, wire.ScheduleKey("ten", c.Start.Parent.Schedule.Nominal), c.Start.IdempotencyKey)
	}

	// Under skip, the first of those that may still run starts, and
	// keeps the others from starting.
	putSchedule(t, m, t0, "skip", api.ScheduleRequest{Workflow: "tick", TaskQueue: "default", Spec: api.ScheduleSpec{Every: "10m"}, CatchupWindow: "1h"})
	fireUntilDone(t, m, t0.Add(3*time.Hour))
	require.Equal(t, map[string]int{"starting": 1, "skipped_overlap": 6, "missed_catchup": 11}, countOutcomes(m, "skip"))
}

func TestAFireBacklogIsDecidedInBoundedRounds(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m, err := NewMemory(MemoryConfig{})
	require.NoError(t, err)
	putSchedule(t, m, t0, "second", api.ScheduleRequest{Workflow: "tick", TaskQueue: "default", Spec: api.ScheduleSpec{Every: "1s"}, CatchupWindow: "1s"})
	d, err := m.FireDue(t.Context(), t0.Add(time.Hour))
	require.NoError(t, err)
	require.Empty(t, d.Commands)
	require.Equal(t, map[string]int{"missed_catchup": maxFiresPerRound}, countOutcomes(m, "second"))
	next, ok := m.NextTimer()
	require.True(t, ok)
	require.Equal(t, t0.Add(time.Hour), next, "more is due at once")
	fireUntilDone(t, m, t0.Add(time.Hour))
	got := countOutcomes(m, "second")
	// The fire of the last second starts; the one at the hour finds it
	// running.
	require.Equal(t, map[string]int{"missed_catchup": 3598, "starting": 1, "skipped_overlap": 1}, got)
}

func TestADefinitionIsTheSameWhateverTheOrderOfItsInputsMembers(t *testing.T) {
	a := api.ScheduleRequest{Workflow: "w", Input: []byte(`{"b": 1, "a": {"d": 2.50, "c": [1, 2]}}`), Spec: api.ScheduleSpec{Every: "1m"}}
	b := a
	b.Input = []byte(`{"a":{"c":[1,2],"d":2.50},"b":1}`)
	require.True(t, sameDefinition(a, b))
	b.Input = []byte(`{"a":{"c":[2,1],"d":2.50},"b":1}`)
	require.False(t, sameDefinition(a, b))
}

func TestANewSpecFiresNoneOfItsPastTimes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m, err := NewMemory(MemoryConfig{})
	require.NoError(t, err)
	putSchedule(t, m, t0, "s", api.ScheduleRequest{Workflow: "tick", TaskQueue: "default", Spec: api.ScheduleSpec{Every: "1h"}, Overlap: api.OverlapAllowAll})
	require.Len(t, fireUntilDone(t, m, t0.Add(time.Hour)), 1)
	// At 01:30 the spec becomes every minute: 01:01 to 01:30 were never
	// due, and do not fire as missed.
	putSchedule(t, m, t0.Add(90*time.Minute), "s", api.ScheduleRequest{Workflow: "tick", TaskQueue: "default", Spec: api.ScheduleSpec{Every: "1m"}, Overlap: api.OverlapAllowAll})
	require.Empty(t, fireUntilDone(t, m, t0.Add(90*time.Minute)))
	require.Len(t, fireUntilDone(t, m, t0.Add(91*time.Minute)), 1)
	require.Equal(t, map[string]int{"starting": 2}, countOutcomes(m, "s"))
}

func TestAFireWhoseStartIsNeverAnsweredStopsHoldingItsSlot(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m, err := NewMemory(MemoryConfig{})
	require.NoError(t, err)
	putSchedule(t, m, t0, "s", api.ScheduleRequest{Workflow: "tick", TaskQueue: "default", Spec: api.ScheduleSpec{Every: "30m"}})
	// The starts are never applied (their commands are dropped here): the
	// first holds the slot, until an hour without an answer.
	started := 0
	for step := 1; step <= 4; step++ {
		started += len(fireUntilDone(t, m, t0.Add(time.Duration(step)*30*time.Minute)))
	}
	require.Equal(t, 2, started, "00:30, then 01:30 once 00:30's start went an hour unanswered")
	require.Equal(t, map[string]int{"start_failed": 1, "starting": 1, "skipped_overlap": 2}, countOutcomes(m, "s"))
}
