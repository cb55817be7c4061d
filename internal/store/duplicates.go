package store

import (
	"github.com/jackc/pgx/v5"
)

// Layers that catch a duplicate (migration 017).
const (
	// LayerReplay: ingest answered a keyed start from its claim without
	// publishing it.
	LayerReplay = "replay"
	// LayerBroker: JetStream dropped the message as a duplicate of a
	// message id it holds.
	LayerBroker = "broker"
	// LayerClaim: the scheduler found the start key claimed, or the keyed
	// signal delivered, before.
	LayerClaim = "claim"
)

// ValidLayer reports whether layer names a layer.
func ValidLayer(layer string) bool {
	return layer == LayerReplay || layer == LayerBroker || layer == LayerClaim
}

// Duplicates counts the duplicates of one key by the layer that caught
// them.
type Duplicates struct {
	Replay, Broker, Claim int64
}

// Add counts one duplicate caught by layer.
func (d *Duplicates) Add(layer string) {
	switch layer {
	case LayerReplay:
		d.Replay++
	case LayerBroker:
		d.Broker++
	case LayerClaim:
		d.Claim++
	}
}

// WorkflowSignalRef names a keyed signal of a signal-with-start by its
// workflow id: it counts against the newest execution of that id.
type WorkflowSignalRef struct {
	WorkflowName   string
	WorkflowID     string
	IdempotencyKey string
}

// DuplicateCounts are the duplicates an apply transaction counts, by what
// they duplicated. The zero value is ready to use.
type DuplicateCounts struct {
	Starts          map[ClaimRef]Duplicates
	Signals         map[SignalRef]Duplicates
	WorkflowSignals map[WorkflowSignalRef]Duplicates
}

// AddStart counts a duplicate of a start key.
func (c *DuplicateCounts) AddStart(ref ClaimRef, layer string) { add(&c.Starts, ref, layer) }

// AddSignal counts a duplicate of an execution's keyed signal.
func (c *DuplicateCounts) AddSignal(ref SignalRef, layer string) { add(&c.Signals, ref, layer) }

// AddWorkflowSignal counts a duplicate of a signal-with-start's keyed
// signal.
func (c *DuplicateCounts) AddWorkflowSignal(ref WorkflowSignalRef, layer string) {
	add(&c.WorkflowSignals, ref, layer)
}

func add[K comparable](m *map[K]Duplicates, k K, layer string) {
	if *m == nil {
		*m = map[K]Duplicates{}
	}
	d := (*m)[k]
	d.Add(layer)
	(*m)[k] = d
}

// queueCountDuplicates adds the counts to the rows they belong to: a live
// start claim, a signal claim. A count whose row does not exist (the
// start it duplicated was refused, the signal never delivered) is
// dropped. It goes after the statements that insert claims.
func queueCountDuplicates(b *pgx.Batch, c DuplicateCounts) {
	if n := len(c.Starts); n > 0 {
		names, keys := make([]string, 0, n), make([]string, 0, n)
		replay, broker, claim := make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
		for ref, d := range c.Starts {
			names, keys = append(names, ref.WorkflowName), append(keys, ref.IdempotencyKey)
			replay, broker, claim = append(replay, d.Replay), append(broker, d.Broker), append(claim, d.Claim)
		}
		b.Queue(`UPDATE start_claims AS c SET replay_duplicates = c.replay_duplicates + v.replay,
				broker_duplicates = c.broker_duplicates + v.broker, claim_duplicates = c.claim_duplicates + v.claim
			FROM (SELECT unnest($1::text[]) AS workflow_name, unnest($2::text[]) AS idempotency_key,
				unnest($3::bigint[]) AS replay, unnest($4::bigint[]) AS broker, unnest($5::bigint[]) AS claim) AS v
			WHERE c.workflow_name = v.workflow_name AND c.idempotency_key = v.idempotency_key AND c.expires_at > now()`,
			names, keys, replay, broker, claim)
	}
	if n := len(c.Signals); n > 0 {
		ids, keys := make([]string, 0, n), make([]string, 0, n)
		broker, claim := make([]int64, 0, n), make([]int64, 0, n)
		for ref, d := range c.Signals {
			ids, keys = append(ids, ref.ExecutionID), append(keys, ref.IdempotencyKey)
			broker, claim = append(broker, d.Broker), append(claim, d.Claim)
		}
		b.Queue(`UPDATE signal_claims AS s SET broker_duplicates = s.broker_duplicates + v.broker,
				claim_duplicates = s.claim_duplicates + v.claim
			FROM (SELECT unnest($1::uuid[]) AS execution_id, unnest($2::text[]) AS idempotency_key,
				unnest($3::bigint[]) AS broker, unnest($4::bigint[]) AS claim) AS v
			WHERE s.execution_id = v.execution_id AND s.idempotency_key = v.idempotency_key`,
			ids, keys, broker, claim)
	}
	if n := len(c.WorkflowSignals); n > 0 {
		names, wids, keys := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		broker, claim := make([]int64, 0, n), make([]int64, 0, n)
		for ref, d := range c.WorkflowSignals {
			names, wids, keys = append(names, ref.WorkflowName), append(wids, ref.WorkflowID), append(keys, ref.IdempotencyKey)
			broker, claim = append(broker, d.Broker), append(claim, d.Claim)
		}
		// The newest execution of the workflow id is the one the
		// signal-with-start went to (it was applied just before).
		b.Queue(`UPDATE signal_claims AS s SET broker_duplicates = s.broker_duplicates + v.broker,
				claim_duplicates = s.claim_duplicates + v.claim
			FROM (SELECT unnest($1::text[]) AS workflow_name, unnest($2::text[]) AS workflow_id, unnest($3::text[]) AS idempotency_key,
				unnest($4::bigint[]) AS broker, unnest($5::bigint[]) AS claim) AS v
			WHERE s.idempotency_key = v.idempotency_key AND s.execution_id = (
				SELECT e.execution_id FROM executions e WHERE e.workflow_name = v.workflow_name AND e.workflow_id = v.workflow_id
				ORDER BY e.created_at DESC LIMIT 1)`,
			names, wids, keys, broker, claim)
	}
}
