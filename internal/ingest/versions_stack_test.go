package ingest_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestTheVersionsRouteTellsWhichCodeRuns: open executions of a workflow,
// by the build that ran them last and by the version they recorded of a
// change; one that waits before the change counts as unrecorded, and a
// closed one counts no more.
func TestTheVersionsRouteTellsWhichCodeRuns(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Worker: harvest.WorkerConfig{BuildID: "v2.0.0~test"}, Register: func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "versioned", func(ctx *harvest.WorkflowContext, early bool) (int, error) {
			if early {
				// Waits before the change: it has not reached it.
				if err := harvest.GetSignalChannel(ctx, "go").Receive(nil); err != nil {
					return 0, err
				}
			}
			v := harvest.GetVersion(ctx, "add-fraud-check", harvest.DefaultVersion, 2)
			return v, harvest.GetSignalChannel(ctx, "go").Receive(nil)
		})
	}})
	c, ctx := stacktest.Client(t, s)
	var ids []string
	for _, early := range []bool{false, false, true} {
		res, err := c.Start(ctx, "versioned", early, client.StartOptions{})
		require.NoError(t, err)
		ids = append(ids, res.ExecutionID)
	}
	want := &api.WorkflowVersionsResponse{Workflow: "versioned", Open: 3,
		Builds:  []api.BuildCount{{BuildID: "v2.0.0~test", Open: 3}},
		Changes: []api.ChangeVersions{{ChangeID: "add-fraud-check", Versions: []api.VersionCount{{Version: 2, Open: 2}}, Unrecorded: 1}}}
	var got *api.WorkflowVersionsResponse
	probe.Until(t, 30*time.Second, "the three executions to run their first task", func() bool {
		var err error
		got, err = c.WorkflowVersions(ctx, "versioned")
		require.NoError(t, err)
		return reflect.DeepEqual(got, want)
	})

	require.NoError(t, c.SendSignal(ctx, ids[0], "go", nil))
	stacktest.WaitCompleted(t, s, ids[0])
	got, err := c.WorkflowVersions(ctx, "versioned")
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Open)
	require.Equal(t, []api.VersionCount{{Version: 2, Open: 1}}, got.Changes[0].Versions)

	none, err := c.WorkflowVersions(ctx, "never_ran")
	require.NoError(t, err)
	require.Equal(t, &api.WorkflowVersionsResponse{Workflow: "never_ran", Builds: []api.BuildCount{}, Changes: []api.ChangeVersions{}}, none)

	bad := stacktest.Call(t, "GET", s.URL()+"/api/harvest/workflows/no.dots/versions", nil, "")
	require.Equal(t, 400, bad.Status)
	require.Equal(t, "invalid_workflow_name", bad.Body["error"])
}
