package harvest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/wire"
)

// deploy puts fn in place of the workflow's code, as a new worker
// process does: nothing of the old code's executions stays cached.
func (s *sim) deploy(fn workflowFunc) {
	s.cache.close()
	s.fn, s.cache = fn, newWorkflowCache(1, nil)
	s.t.Cleanup(s.cache.close)
}

// The code of the tests' workflow before a change: charge, wait for the
// shipment, complete.
func orderV1(ctx *WorkflowContext, _ struct{}) (string, error) {
	if err := ExecuteActivity(ctx, "charge", nil).Get(nil); err != nil {
		return "", err
	}
	var shipped string
	if err := GetSignalChannel(ctx, "shipped").Receive(&shipped); err != nil {
		return "", err
	}
	return "v1:" + shipped, nil
}

// orderV2 adds a fraud check before the charge, behind Patched.
func orderV2(ctx *WorkflowContext, _ struct{}) (string, error) {
	path := "v1"
	if Patched(ctx, "fraud-check") {
		path = "v2"
		if err := ExecuteActivity(ctx, "fraud_check", nil).Get(nil); err != nil {
			return "", err
		}
	}
	if err := ExecuteActivity(ctx, "charge", nil).Get(nil); err != nil {
		return "", err
	}
	var shipped string
	if err := GetSignalChannel(ctx, "shipped").Receive(&shipped); err != nil {
		return "", err
	}
	return path + ":" + shipped, nil
}

// orderV3 is the code once every execution took the fraud check: the
// patch is deprecated, the old path gone.
func orderV3(ctx *WorkflowContext, _ struct{}) (string, error) {
	DeprecatePatch(ctx, "fraud-check")
	if err := ExecuteActivity(ctx, "fraud_check", nil).Get(nil); err != nil {
		return "", err
	}
	if err := ExecuteActivity(ctx, "charge", nil).Get(nil); err != nil {
		return "", err
	}
	var shipped string
	if err := GetSignalChannel(ctx, "shipped").Receive(&shipped); err != nil {
		return "", err
	}
	return "v3:" + shipped, nil
}

// orderV4 is the code once no worker runs Patched any more: the call is
// gone, and the markers executions recorded are passed over.
func orderV4(ctx *WorkflowContext, _ struct{}) (string, error) {
	if err := ExecuteActivity(ctx, "fraud_check", nil).Get(nil); err != nil {
		return "", err
	}
	if err := ExecuteActivity(ctx, "charge", nil).Get(nil); err != nil {
		return "", err
	}
	var shipped string
	if err := GetSignalChannel(ctx, "shipped").Receive(&shipped); err != nil {
		return "", err
	}
	return "v4:" + shipped, nil
}

// An execution that went past the change under the old code replays its
// old path under the new code and finishes there; one that reaches the
// change under the new code records the version and takes the new path,
// on every replay.
func TestAnOldExecutionKeepsItsPathAcrossADeploy(t *testing.T) {
	t.Parallel()
	old := newSim(t, registered(orderV1), struct{}{})
	require.Equal(t, []string{"schedule_activity charge"}, kinds(old.task()))
	old.complete(1, nil)
	require.Empty(t, old.task(), "waiting for the shipment")

	old.deploy(registered(orderV2))
	old.signal("shipped", "parcel-1")
	require.Equal(t, []string{wire.DecisionCompleteWorkflow}, kinds(old.task()), "the old execution replays the old path and finishes")
	require.JSONEq(t, `"v1:parcel-1"`, string(old.result()))
	for _, ev := range old.hist {
		require.NotEqual(t, wire.EventVersionMarker, ev.Type, "an execution past the change records no version")
	}

	fresh := newSim(t, registered(orderV2), struct{}{})
	d := fresh.task()
	require.Equal(t, []string{wire.DecisionRecordVersion, "schedule_activity fraud_check"}, kinds(d))
	require.Equal(t, &wire.VersionMarkerAttrs{ChangeID: "fraud-check", Version: 1}, d[0].Version)
	fresh.complete(1, nil)
	require.Equal(t, []string{"schedule_activity charge"}, kinds(fresh.task()), "the recorded version holds on replay")
	fresh.complete(2, nil)
	require.Empty(t, fresh.task())
	fresh.signal("shipped", "parcel-2")
	require.Equal(t, []string{wire.DecisionCompleteWorkflow}, kinds(fresh.task()))
	require.JSONEq(t, `"v2:parcel-2"`, string(fresh.result()))
	var markers []wire.VersionMarkerAttrs
	for _, ev := range fresh.hist {
		if ev.Type == wire.EventVersionMarker {
			var a wire.VersionMarkerAttrs
			require.NoError(t, json.Unmarshal(ev.Attrs, &a))
			markers = append(markers, a)
		}
	}
	require.Equal(t, []wire.VersionMarkerAttrs{{ChangeID: "fraud-check", Version: 1}}, markers, "one marker, however often the task replays")
}

// DeprecatePatch replays the executions that took the patch, and new
// ones record it; once the call is removed, the recorded markers are
// passed over. An execution that went past the change without it cannot
// run code that deprecated the old path: its task fails with a
// VersionError, and the execution is not failed.
func TestDeprecatingAndRemovingAPatch(t *testing.T) {
	t.Parallel()
	patched := newSim(t, registered(orderV2), struct{}{})
	patched.task()
	patched.complete(1, nil)
	patched.task()

	patched.deploy(registered(orderV3))
	patched.complete(2, nil)
	require.Empty(t, patched.task(), "orderV3 replays an execution that took the patch")

	patched.deploy(registered(orderV4))
	patched.signal("shipped", "p")
	require.Equal(t, []string{wire.DecisionCompleteWorkflow}, kinds(patched.task()), "with the call gone, its marker is passed over")
	require.JSONEq(t, `"v4:p"`, string(patched.result()))

	fresh := newSim(t, registered(orderV3), struct{}{})
	require.Equal(t, []string{wire.DecisionRecordVersion, "schedule_activity fraud_check"}, kinds(fresh.task()),
		"a new execution records the deprecated patch, for workers still running Patched")

	old := newSim(t, registered(orderV1), struct{}{})
	old.task()
	old.complete(1, nil)
	old.task()
	old.deploy(registered(orderV3))
	old.signal("shipped", "p")
	_, err := old.tryTask()
	require.ErrorContains(t, err, `GetVersion("fraud-check"): the execution took version -1, and this code supports 1 to 1`)
}

// A GetVersion call no history could record, or with its bounds the
// wrong way round, fails the workflow task and names the call.
func TestGetVersionRefusesWhatItCannotRecord(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		changeID string
		min, max int
		want     string
	}{
		{"empty change id", "", DefaultVersion, 1, "GetVersion: the change id is empty"},
		{"min above max", "c", 2, 1, `GetVersion("c", 2, 1): minSupported is above maxSupported`},
		{"below the default", "c", -2, 1, `GetVersion("c", -2, 1): no version is below DefaultVersion`},
		{"not storable", "c\x00", DefaultVersion, 1, "the change id cannot be recorded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newSim(t, registered(func(ctx *WorkflowContext, _ struct{}) (int, error) {
				return GetVersion(ctx, c.changeID, c.min, c.max), nil
			}), struct{}{})
			_, err := s.tryTask()
			require.ErrorContains(t, err, c.want)
		})
	}
}

// Later calls with the same change id return the first one's version,
// and record nothing more; raising maxSupported later gives new
// executions the new version while recorded ones keep theirs.
func TestGetVersionIsChosenOncePerExecution(t *testing.T) {
	t.Parallel()
	twice := func(maxV int) workflowFunc {
		return registered(func(ctx *WorkflowContext, _ struct{}) ([]int, error) {
			a := GetVersion(ctx, "step", DefaultVersion, maxV)
			if err := Sleep(ctx, 0); err != nil {
				return nil, err
			}
			b := GetVersion(ctx, "step", DefaultVersion, maxV)
			return []int{a, b}, nil
		})
	}
	s := newSim(t, twice(1), struct{}{})
	require.Equal(t, []string{wire.DecisionRecordVersion, wire.DecisionStartTimer}, kinds(s.task()))
	s.deploy(twice(2))
	s.fire(1)
	require.Equal(t, []string{wire.DecisionCompleteWorkflow}, kinds(s.task()))
	require.JSONEq(t, `[1,1]`, string(s.result()))

	n := newSim(t, twice(2), struct{}{})
	n.task()
	n.fire(1)
	n.task()
	require.JSONEq(t, `[2,2]`, string(n.result()))
}
