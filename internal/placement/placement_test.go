package placement_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/placement"
)

func set(t *testing.T, ss ...placement.Store) *placement.Set {
	t.Helper()
	s, err := placement.New(ss)
	require.NoError(t, err)
	return s
}

func TestNewNamesWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		stores []placement.Store
		want   string
	}{
		{nil, "none"},
		{[]placement.Store{{Name: "A", Mode: placement.Writable}}, "name"},
		{[]placement.Store{{Name: "a", Mode: placement.Writable}, {Name: "a", Mode: placement.Writable}}, "stores[0]'s too"},
		{[]placement.Store{{Name: "a", Mode: "draining"}}, "mode"},
		{[]placement.Store{{Name: "a", Mode: placement.ReadOnly}}, "no writable store"},
	} {
		_, err := placement.New(tc.stores)
		require.ErrorContains(t, err, tc.want, "%+v", tc.stores)
	}
}

// keys are n distinct keys.
func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("evt-%d", i)
	}
	return out
}

func TestPlacementIsDeterministicAndBalanced(t *testing.T) {
	for _, n := range []int{2, 3} {
		var ss []placement.Store
		for i := range n {
			ss = append(ss, placement.Store{Name: fmt.Sprintf("store-%d", i), Mode: placement.Writable})
		}
		s := set(t, ss...)
		again := set(t, ss...)
		counts := map[string]int{}
		const total = 30_000
		for _, k := range keys(total) {
			st, err := s.Place(placement.StartParts("charge", "", k)...)
			require.NoError(t, err)
			other, err := again.Place(placement.StartParts("charge", "", k)...)
			require.NoError(t, err)
			require.Equal(t, st, other, "the same key, the same store, whichever process places it")
			counts[st.Name]++
		}
		// Each store gets its share within 5 standard deviations.
		want := float64(total) / float64(n)
		sd := math.Sqrt(want * (1 - 1/float64(n)))
		for name, c := range counts {
			require.InDelta(t, want, float64(c), 5*sd, "%d stores: %s has %d of %d", n, name, c, total)
		}
		require.Len(t, counts, n)
	}
}

// TestADrainMovesOnlyWhatItMust: with b drained, what b would have taken
// goes to the others, spread over them; nothing else moves. Lookups still
// find b as the home of what it held.
func TestADrainMovesOnlyWhatItMust(t *testing.T) {
	a, b, c := placement.Store{Name: "a", Mode: placement.Writable}, placement.Store{Name: "b", Mode: placement.Writable}, placement.Store{Name: "c", Mode: placement.Writable}
	before := set(t, a, b, c)
	b.Mode = placement.ReadOnly
	after := set(t, a, b, c)
	moved := map[string]int{}
	for _, k := range keys(9_000) {
		parts := placement.StartParts("charge", "", k)
		was, err := before.Place(parts...)
		require.NoError(t, err)
		now, err := after.Place(parts...)
		require.NoError(t, err)
		require.Equal(t, was.Name, after.Home(parts...).Name, "a lookup finds where it was placed")
		if was.Name != "b" {
			require.Equal(t, was.Name, now.Name, "%s moved off %s", k, was.Name)
			continue
		}
		require.NotEqual(t, "b", now.Name)
		moved[now.Name]++
	}
	require.InDelta(t, moved["a"], moved["c"], 0.2*float64(moved["a"]+moved["c"]), "b's keys spread over a and c: %v", moved)
}

func TestPinnedStartsNeverFallBack(t *testing.T) {
	s := set(t, placement.Store{Name: "a", Mode: placement.Writable}, placement.Store{Name: "b", Mode: placement.ReadOnly})
	st, err := s.Pinned("a")
	require.NoError(t, err)
	require.Equal(t, "a", st.Name)
	_, err = s.Pinned("b")
	require.True(t, errors.Is(err, placement.ErrReadOnly), "%v", err)
	_, err = s.Pinned("z")
	require.True(t, errors.Is(err, placement.ErrUnknownStore), "%v", err)
}

func TestExecutionIDsNameTheirStoreAndShard(t *testing.T) {
	l := placement.Layout{Set: set(t, placement.Store{Name: "a", Mode: placement.Writable}, placement.Store{Name: "b", Mode: placement.Writable},
		placement.Store{Name: "c", Mode: placement.ReadOnly}), Shards: 16}
	require.Equal(t, 48, l.TotalShards())
	for shard := range l.TotalShards() {
		id := l.MintExecutionID(shard)
		require.Equal(t, shard, l.ExecutionShard(id), id)
		require.Equal(t, shard/16, l.StoreOf(id))
		if shard < 16 {
			// Store 0's ids are a single-store deployment's.
			require.Equal(t, shard, placement.ExecutionShard(16, id))
		}
	}
	require.Zero(t, l.StoreOf("not an id"))
	// A version 7 id is store 0's, whatever its last bytes hold.
	v7 := uuid.Must(uuid.NewV7())
	v7[14], v7[15] = 0, 1
	require.Zero(t, l.StoreOf(v7.String()))
	require.Zero(t, l.StoreOf(dedup.NewID()), "an id without the mark is store 0's")
}

// TestAMintedWorkflowIDMeetsItsKey: a keyed start with no workflow_id is
// placed by its key; the workflow_id minted for it is placed on the same
// shard, so a later start naming it finds the execution.
func TestAMintedWorkflowIDMeetsItsKey(t *testing.T) {
	l := placement.Layout{Set: set(t, placement.Store{Name: "a", Mode: placement.Writable}, placement.Store{Name: "b", Mode: placement.Writable},
		placement.Store{Name: "c", Mode: placement.Writable}), Shards: 8}
	stored := map[int]int{}
	for _, k := range keys(300) {
		shard, err := l.StartShard("charge", "", k)
		require.NoError(t, err)
		require.Equal(t, shard, l.HomeShard("charge", "", k))
		id := l.MintWorkflowID(shard, "charge")
		again, err := l.StartShard("charge", id, "")
		require.NoError(t, err)
		require.Equal(t, shard, again)
		stored[l.StoreOfShard(shard)]++
	}
	require.Len(t, stored, 3)
}

// TestASingleStoreLayoutIsTheOneShardSpace: one store routes as Harvest
// always has.
func TestASingleStoreLayoutIsTheOneShardSpace(t *testing.T) {
	l := placement.Single(16)
	for _, k := range keys(100) {
		shard, err := l.StartShard("charge", "", k)
		require.NoError(t, err)
		require.Equal(t, placement.StartShard(16, "charge", "", k), shard)
		id := dedup.NewID()
		require.Equal(t, placement.ExecutionShard(16, id), l.ExecutionShard(id))
	}
}
