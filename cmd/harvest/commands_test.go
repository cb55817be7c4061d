package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// startStack starts a stack for the CLI to talk to, on its own NATS server
// and database, stopped at cleanup.
// startStack starts a stack of its own for one test: the tests of the
// command line run against a real ingest.
func startStack(t *testing.T, cfg devstack.Config) *devstack.Stack {
	t.Helper()
	return stacktest.Start(t, cfg)
}

// TestCommandsDead: `harvest commands dead` lists a command the scheduler
// set aside, `harvest commands dead <id>` shows its message, and
// `harvest commands get` its outcome.
func TestCommandsDead(t *testing.T) {
	t.Parallel()
	ctx := natstest.Context(t)
	s := startStack(t, devstack.Config{})
	cmd := wire.Command{CommandID: dedup.NewID(), Kind: wire.KindStart, Start: &wire.StartCommand{
		WorkflowName: "charge", WorkflowID: "bad\x00id", TaskQueue: wire.DefaultTaskQueue}}
	_, err := s.Topology.PublishCommand(ctx, 0, &cmd)
	require.NoError(t, err)

	probe.Until(t, 30*time.Second, "the command to be set aside", func() bool {
		out, _, err := runCLI(t, "commands", "dead", "--addr", s.URL(), "--json")
		require.NoError(t, err)
		var got struct {
			DeadCommands []struct {
				ID        int64  `json:"id"`
				CommandID string `json:"command_id"`
			} `json:"dead_commands"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		return len(got.DeadCommands) == 1 && got.DeadCommands[0].CommandID == cmd.CommandID
	})
	list, _, err := runCLI(t, "commands", "dead", "--addr", s.URL())
	require.NoError(t, err)
	require.Contains(t, list, "ID")
	require.Contains(t, list, cmd.CommandID)
	require.Contains(t, list, "unappliable")

	one, _, err := runCLI(t, "commands", "dead", "1", "--addr", s.URL())
	require.NoError(t, err)
	require.Contains(t, one, "payload:")
	require.Contains(t, one, `bad\u0000id`)
	one, _, err = runCLI(t, "commands", "dead", "1", "--addr", s.URL(), "--json")
	require.NoError(t, err)
	require.Contains(t, one, `"payload"`)
	got, _, err := runCLI(t, "commands", "get", cmd.CommandID, "--addr", s.URL())
	require.NoError(t, err)
	require.Contains(t, got, "command "+cmd.CommandID+": rejected")
	require.Contains(t, got, "command_rejected")
	got, _, err = runCLI(t, "commands", "get", cmd.CommandID, "--addr", s.URL(), "--json")
	require.NoError(t, err)
	require.Contains(t, got, `"status": "rejected"`)
	_, _, err = runCLI(t, "commands", "dead", "999", "--addr", s.URL())
	require.ErrorContains(t, err, "dead_command_not_found")
}
