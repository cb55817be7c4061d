package placement

import (
	"encoding/binary"
	"hash/fnv"

	"github.com/harvest-engine/harvest/internal/dedup"
)

// Shard routing: which shard of the deployment's shard count a command
// goes to. A start is routed by what names it, a command on an execution
// by the execution's id, and ids Harvest mints are minted on the shard
// they must route to.

// Shard maps the parts to a shard in [0, shards), with FNV-1a 32 over the
// length-prefixed parts.
func Shard(shards int, parts ...string) int {
	h := fnv.New32a()
	var lb [binary.MaxVarintLen64]byte
	for _, p := range parts {
		n := binary.PutUvarint(lb[:], uint64(len(p)))
		_, _ = h.Write(lb[:n])
		_, _ = h.Write([]byte(p))
	}
	return int(h.Sum32() % uint32(shards))
}

// StartShard routes a start command. A start that names its workflow_id is
// routed by (workflow_name, workflow_id); a keyed start without one by
// (workflow_name, key); a start with neither has its workflow_id minted
// first (see MintWorkflowID), so the same rule applies.
func StartShard(shards int, workflowName, workflowID, key string) int {
	if workflowID == "" && key != "" {
		return Shard(shards, workflowName, "key", key)
	}
	return Shard(shards, workflowName, "id", workflowID)
}

// ExecutionShard is the shard that holds an execution: execution ids are
// minted on their shard (see MintExecutionID), so commands that name an
// execution, such as signals, are routed by its id alone.
func ExecutionShard(shards int, executionID string) int {
	return Shard(shards, "exec", executionID)
}

// MintExecutionID returns a fresh execution id that routes to shard.
func MintExecutionID(shards, shard int) string {
	for {
		id := dedup.NewID()
		if ExecutionShard(shards, id) == shard {
			return id
		}
	}
}

// MintWorkflowID returns a fresh workflow_id that routes to shard, so that a
// later start naming it explicitly reaches the shard that holds the
// execution.
func MintWorkflowID(shards, shard int, workflowName string) string {
	for {
		id := dedup.NewID()
		if Shard(shards, workflowName, "id", id) == shard {
			return id
		}
	}
}
