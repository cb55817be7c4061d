package placement

import (
	"encoding/binary"

	"github.com/google/uuid"
)

// Layout is how a deployment spreads its executions: its stores, each
// with Shards shards of the command stream, numbered across the stores:
// store i holds shards i×Shards to (i+1)×Shards−1. Store 0's shards are
// numbered as a single-store deployment's, and its execution ids are
// minted as one's: a deployment that adds stores keeps its first one as
// it was.
type Layout struct {
	Set    *Set
	Shards int
}

// Single is the layout of a deployment with one store.
func Single(shards int) Layout {
	s, _ := New([]Store{{Name: DefaultName, Mode: Writable}})
	return Layout{Set: s, Shards: shards}
}

// DefaultName names the store of a deployment configured with one
// database_url.
const DefaultName = "default"

// TotalShards is the number of shards across the stores.
func (l Layout) TotalShards() int { return l.Set.Len() * l.Shards }

// StoreOfShard is the index of the store that holds shard.
func (l Layout) StoreOfShard(shard int) int { return shard / l.Shards }

// Base is the first shard of store i.
func (l Layout) Base(i int) int { return i * l.Shards }

// An execution id of store 0 is a version 7 UUID, as a single-store
// deployment mints it. One of another store is a version 8 UUID (RFC
// 9562's custom version): a v7's time and random bits, whose last two
// bytes are the store's index. The version tells them apart, so no id of
// store 0, however old, is taken for another store's.
const storeVersion = 8

// StoreOf is the index of the store an execution id names: 0 for a
// version 7 id (store 0's) or anything else that names no store.
func (l Layout) StoreOf(executionID string) int {
	id, err := uuid.Parse(executionID)
	if err != nil || id.Version() != storeVersion {
		return 0
	}
	if i := int(binary.BigEndian.Uint16(id[14:])); i < l.Set.Len() {
		return i
	}
	return 0
}

// ExecutionShard is the shard that holds an execution: its store's, and
// within them the one its id hashes to.
func (l Layout) ExecutionShard(executionID string) int {
	return l.Base(l.StoreOf(executionID)) + ExecutionShard(l.Shards, executionID)
}

// MintExecutionID returns a fresh execution id that ExecutionShard routes
// to shard.
func (l Layout) MintExecutionID(shard int) string {
	store, local := l.StoreOfShard(shard), shard%l.Shards
	if store == 0 {
		return MintExecutionID(l.Shards, local)
	}
	for {
		id := uuid.Must(uuid.NewV7())
		id[6] = id[6]&0x0f | storeVersion<<4
		binary.BigEndian.PutUint16(id[14:], uint16(store))
		if s := id.String(); ExecutionShard(l.Shards, s) == local {
			return s
		}
	}
}

// place is the shard of parts within store i: the store's base and the
// local shard local.
func (l Layout) place(i, local int) int { return l.Base(i) + local }

// StartShard is the shard a new start goes to: placed over the writable
// stores by StartParts (see Set.Place), and within its store as a
// single-store deployment would (StartShard).
func (l Layout) StartShard(workflowName, workflowID, key string) (int, error) {
	st, err := l.Set.Place(StartParts(workflowName, workflowID, key)...)
	if err != nil {
		return 0, err
	}
	return l.place(l.Set.Index(st.Name), StartShard(l.Shards, workflowName, workflowID, key)), nil
}

// HomeShard is the shard a start was placed on while its home store was
// writable: where replays and lookups of it look, whatever the stores'
// modes are now.
func (l Layout) HomeShard(workflowName, workflowID, key string) int {
	st := l.Set.Home(StartParts(workflowName, workflowID, key)...)
	return l.place(l.Set.Index(st.Name), StartShard(l.Shards, workflowName, workflowID, key))
}

// PinnedStartShard is StartShard for a start pinned to the store named
// store: an error wrapping ErrUnknownStore or ErrReadOnly if it cannot
// take it.
func (l Layout) PinnedStartShard(store, workflowName, workflowID, key string) (int, error) {
	st, err := l.Set.Pinned(store)
	if err != nil {
		return 0, err
	}
	return l.place(l.Set.Index(st.Name), StartShard(l.Shards, workflowName, workflowID, key)), nil
}

// PartsShard is the shard of what parts place (a start policy's key,
// for one), over the writable stores, and within the store by the same
// parts.
func (l Layout) PartsShard(parts ...string) (int, error) {
	st, err := l.Set.Place(parts...)
	if err != nil {
		return 0, err
	}
	return l.place(l.Set.Index(st.Name), Shard(l.Shards, parts...)), nil
}

// MintWorkflowID returns a fresh workflow_id of workflowName for a start
// on shard with no workflow_id of its own: one whose own placement
// (StartParts with the id) is the same shard, so that a later start or
// read naming it explicitly meets the execution. Its store must be
// writable (bounded rejection sampling: about stores × shards tries).
func (l Layout) MintWorkflowID(shard int, workflowName string) string {
	store, local := l.StoreOfShard(shard), shard%l.Shards
	for {
		id := MintWorkflowID(l.Shards, local, workflowName)
		if l.Set.Len() == 1 || l.Set.Index(l.Set.Home(StartParts(workflowName, id, "")...).Name) == store {
			return id
		}
	}
}

// ScheduleShard is the shard that keeps the schedule id: placed by its
// id over the stores as it was while its home store was writable, so
// that a schedule stays where it was created whatever the stores' modes
// are now.
func (l Layout) ScheduleShard(id string) int {
	parts := []string{"schedule", id}
	st := l.Set.Home(parts...)
	return l.place(l.Set.Index(st.Name), Shard(l.Shards, parts...))
}

// BatchShards are the shards that keep batch id's parts, one in each
// store (docs/batches.md): each store's shard that the id hashes to.
func (l Layout) BatchShards(id string) []int {
	local := Shard(l.Shards, "batch", id)
	out := make([]int, l.Set.Len())
	for i := range out {
		out[i] = l.place(i, local)
	}
	return out
}
