// Package placement owns where an execution lives: which shard a command
// goes to (shard.go: StartShard, ExecutionShard, and the ids minted on
// their shard), and the placement of executions over several
// PostgreSQL stores (docs/deploy.md#several-postgresql-stores): which
// store a start goes to, by rendezvous hashing over the stores' names,
// re-picked among the writable ones only when the pick is draining
// (read_only), so that a drain moves only what it must; which shards a
// store holds (Layout); and which store an execution id names, which its
// minting encodes.
//
// Keyed dedup and (workflow_name, workflow_id) uniqueness are store-local:
// they hold while the set of writable stores is stable (the seed's
// "Known limitation — shard drain within the retention window").
package placement

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
)

// Mode is what a store takes: new executions (writable), or only the work
// of those it holds (read_only: draining).
type Mode string

// The modes of a store.
const (
	Writable Mode = "writable"
	ReadOnly Mode = "read_only"
)

// Store is one PostgreSQL store, as placement sees it.
type Store struct {
	Name string
	Mode Mode
}

// Errors of placement; match them with errors.Is.
var (
	// ErrUnknownStore: a start pinned to a store the set does not have.
	ErrUnknownStore = errors.New("unknown store")
	// ErrReadOnly: a start pinned to a store that takes no new
	// executions.
	ErrReadOnly = errors.New("store is read_only")
	// ErrNoWritable: no store takes new executions.
	ErrNoWritable = errors.New("no writable store")
)

var namePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// MaxStores bounds a deployment's stores.
const MaxStores = 64

// Set is the stores of a deployment, in configuration order. It is
// immutable: a drain makes a new Set.
type Set struct {
	stores []Store
	byName map[string]int
}

// New checks stores and returns their Set: one store at least, at most
// MaxStores, names of 1 to 32 lower-case letters, digits, '-' and '_'
// (starting with a letter), no name twice, modes writable or read_only,
// and at least one writable. A store's place in the list is its index,
// which its shards' numbers and its execution ids carry: stores are only
// ever added at the end, never reordered or removed (a drained store
// stays, read_only).
func New(stores []Store) (*Set, error) {
	if len(stores) == 0 {
		return nil, errors.New("stores: none")
	}
	if len(stores) > MaxStores {
		return nil, fmt.Errorf("stores: %d: at most %d", len(stores), MaxStores)
	}
	s := &Set{stores: append([]Store(nil), stores...), byName: map[string]int{}}
	writable := false
	for i, st := range stores {
		if !namePattern.MatchString(st.Name) {
			return nil, fmt.Errorf("stores[%d]: name %q: want 1 to 32 of a-z, 0-9, '-' and '_', starting with a letter", i, st.Name)
		}
		if j, ok := s.byName[st.Name]; ok {
			return nil, fmt.Errorf("stores[%d]: name %q is stores[%d]'s too", i, st.Name, j)
		}
		switch st.Mode {
		case Writable:
			writable = true
		case ReadOnly:
		default:
			return nil, fmt.Errorf("stores[%d] (%s): mode %q: want %s or %s", i, st.Name, st.Mode, Writable, ReadOnly)
		}
		s.byName[st.Name] = i
	}
	if !writable {
		return nil, fmt.Errorf("stores: %w: a deployment needs one to start executions", ErrNoWritable)
	}
	return s, nil
}

// Lookup returns the store named name.
func (s *Set) Lookup(name string) (Store, bool) {
	i, ok := s.byName[name]
	if !ok {
		return Store{}, false
	}
	return s.stores[i], true
}

// Index is the place of the store named name in the set, -1 for none.
func (s *Set) Index(name string) int {
	if i, ok := s.byName[name]; ok {
		return i
	}
	return -1
}

// Len is the number of stores.
func (s *Set) Len() int { return len(s.stores) }

// score is store's rendezvous weight for the parts: FNV-1a 64 over the
// store's name and the length-prefixed parts.
func score(store string, parts []string) uint64 {
	h := fnv.New64a()
	var lb [binary.MaxVarintLen64]byte
	for _, p := range append([]string{store}, parts...) {
		n := binary.PutUvarint(lb[:], uint64(len(p)))
		_, _ = h.Write(lb[:n])
		_, _ = h.Write([]byte(p))
	}
	// FNV's low bits mix poorly for near-identical inputs: finish with
	// a 64-bit mixer so the weights of two stores are independent.
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// pick is the store of highest weight for parts among those keep admits.
func (s *Set) pick(parts []string, keep func(Store) bool) (Store, bool) {
	var (
		best  Store
		top   uint64
		found bool
	)
	for _, st := range s.stores {
		if !keep(st) {
			continue
		}
		if w := score(st.Name, parts); !found || w > top || (w == top && st.Name < best.Name) {
			best, top, found = st, w, true
		}
	}
	return best, found
}

// Home is the store parts hash to among all the stores, writable or not:
// where what was placed by them while the store was writable lives. Reads
// and replays look there first.
func (s *Set) Home(parts ...string) Store {
	st, _ := s.pick(parts, func(Store) bool { return true })
	return st
}

// Place is the store a new execution placed by parts goes to: its Home if
// that is writable, else the writable store of highest weight. Only what
// a drained store would have taken moves; the rest stays where it was.
func (s *Set) Place(parts ...string) (Store, error) {
	if home := s.Home(parts...); home.Mode == Writable {
		return home, nil
	}
	st, ok := s.pick(parts, func(st Store) bool { return st.Mode == Writable })
	if !ok {
		return Store{}, ErrNoWritable
	}
	return st, nil
}

// StartParts are the parts a start is placed by: (workflow_name,
// idempotency_key) for a keyed start with no workflow_id, so that its
// retries meet; (workflow_name, workflow_id) otherwise, so that the
// reuse policy and reject_duplicate see the workflow_id's executions. A
// minted workflow_id is minted on the key's store (MintWorkflowID), so a
// later start naming it meets it there.
func StartParts(workflowName, workflowID, key string) []string {
	if workflowID == "" && key != "" {
		return []string{workflowName, "key", key}
	}
	return []string{workflowName, "id", workflowID}
}

// Pinned is the store a start pinned to name goes to: an error wrapping
// ErrUnknownStore or ErrReadOnly when that store cannot take it (never a
// silent fallback).
func (s *Set) Pinned(name string) (Store, error) {
	st, ok := s.Lookup(name)
	switch {
	case !ok:
		return Store{}, fmt.Errorf("%w %q", ErrUnknownStore, name)
	case st.Mode != Writable:
		return Store{}, fmt.Errorf("%w: %q takes no new executions", ErrReadOnly, name)
	}
	return st, nil
}
