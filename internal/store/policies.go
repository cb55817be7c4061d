package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/internal/wire"
)

// PolicyRef names the state of one key of a workflow's start policy.
type PolicyRef struct {
	WorkflowName string
	Kind         string
	Key          string
}

// PolicyState is the state of one policy key, as an apply transaction
// reads and rewrites it.
type PolicyState struct {
	// Scheduled are the times a throttle's latest starts were scheduled
	// to begin, oldest first: the schedule a new start is fitted into.
	Scheduled []time.Time
	// Begun are the times a throttle's latest starts began, oldest
	// first: no start begins while limit of them are within a period.
	Begun []time.Time
	// Tail is the latest time a throttle's waiting start was put off to:
	// a later start is scheduled no earlier, so they begin in order.
	Tail time.Time
	// Queued is how many of a throttle's starts wait.
	Queued int
	// Open is a debounce's or batch's group collecting starts, nil when
	// none is.
	Open *DeferredGroup
	// StaleAt is when the state holds nothing any more (if Open is nil
	// and nothing is queued).
	StaleAt time.Time
	// Running is how many executions of a concurrency key run, Limit its
	// limit (the latest start's); its Queued executions are Pending.
	Running, Limit int
}

// throttleState is how start_policy_keys.throttle stores a throttle's
// times, in Unix microseconds.
type throttleState struct {
	Scheduled []int64 `json:"scheduled,omitempty"`
	Begun     []int64 `json:"begun,omitempty"`
	Tail      int64   `json:"tail,omitempty"`
}

func micros(ts []time.Time) []int64 {
	out := make([]int64, len(ts))
	for i, t := range ts {
		out[i] = t.UnixMicro()
	}
	return out
}

func times(us []int64) []time.Time {
	if len(us) == 0 {
		return nil
	}
	out := make([]time.Time, len(us))
	for i, u := range us {
		out[i] = time.UnixMicro(u).UTC()
	}
	return out
}

// DeferredGroup is a group of deferred starts that begins one execution
// at DueAt. Its JSON is its deferred_starts row (to_json of the row, and
// json_populate_recordset back).
type DeferredGroup struct {
	GroupID      string    `json:"group_id"`
	Shard        int       `json:"shard"`
	WorkflowName string    `json:"workflow_name"`
	Kind         string    `json:"kind"`
	Key          string    `json:"policy_key"`
	DueAt        time.Time `json:"due_at"`
	FirstSeq     uint64    `json:"first_seq"`
	// Policy is the policy the group's (last) start came under.
	Policy    wire.StartPolicy `json:"policy"`
	TaskQueue string           `json:"task_queue"`
	// Versioning and PinnedBuild are the start's
	// (wire.StartCommand.Versioning, PinnedBuild).
	Versioning  *string `json:"versioning"`
	PinnedBuild *string `json:"pinned_build"`
	// Priority is the start's (wire.StartCommand.Priority), nil for the
	// default.
	Priority           *int            `json:"priority"`
	Input              json.RawMessage `json:"input"`
	CompletionCallback *string         `json:"completion_callback"`
	StartedBy          *string         `json:"started_by"`
	TraceParent        *string         `json:"trace_parent"`
	Size               int             `json:"size"`
	Bytes              int64           `json:"bytes"`
	CreatedAt          time.Time       `json:"created_at"`
}

// Ref is the policy key the group belongs to.
func (g *DeferredGroup) Ref() PolicyRef {
	return PolicyRef{WorkflowName: g.WorkflowName, Kind: g.Kind, Key: g.Key}
}

// DeferredMember is one start of a group: its command, and its input
// for a batch.
type DeferredMember struct {
	GroupID   string
	Position  int
	CommandID string
	StreamSeq uint64
	Input     json.RawMessage
}

// decodeGroup decodes a deferred_starts row read as to_json(g).
func decodeGroup(raw []byte) (*DeferredGroup, error) {
	g := &DeferredGroup{}
	if err := json.Unmarshal(raw, g); err != nil {
		return nil, fmt.Errorf("decode deferred start group: %w", err)
	}
	if string(g.Input) == "null" {
		g.Input = nil
	}
	return g, nil
}

// LoadPolicyKeys reads into out the state of the policy keys, with their
// open groups, locked for update. Keys with no state are absent.
func (r *Reads) LoadPolicyKeys(refs []PolicyRef, out map[PolicyRef]*PolicyState) {
	if len(refs) == 0 {
		return
	}
	names, kinds, keys := make([]string, len(refs)), make([]string, len(refs)), make([]string, len(refs))
	for i, ref := range refs {
		names[i], kinds[i], keys[i] = ref.WorkflowName, ref.Kind, ref.Key
	}
	r.b.Queue(`SELECT k.workflow_name, k.kind, k.policy_key, k.throttle, k.queued, k.stale_at, k.running, k.climit,
			CASE WHEN g.group_id IS NULL THEN NULL ELSE to_json(g) END
		FROM start_policy_keys k LEFT JOIN deferred_starts g ON g.group_id = k.open_group
		WHERE (k.workflow_name, k.kind, k.policy_key) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))
		FOR UPDATE OF k`, names, kinds, keys).Query(func(rows pgx.Rows) error {
		var (
			ref      PolicyRef
			throttle []byte
			group    []byte
			queued   int
			staleAt  time.Time
			running  int
			limit    int
		)
		_, err := pgx.ForEachRow(rows, []any{&ref.WorkflowName, &ref.Kind, &ref.Key, &throttle, &queued, &staleAt, &running, &limit, &group}, func() error {
			st := &PolicyState{Queued: queued, StaleAt: staleAt, Running: running, Limit: limit}
			if throttle != nil {
				var ts throttleState
				if err := json.Unmarshal(throttle, &ts); err != nil {
					return fmt.Errorf("decode throttle state: %w", err)
				}
				st.Scheduled, st.Begun = times(ts.Scheduled), times(ts.Begun)
				if ts.Tail != 0 {
					st.Tail = time.UnixMicro(ts.Tail).UTC()
				}
			}
			if group != nil {
				g, err := decodeGroup(group)
				if err != nil {
					return err
				}
				st.Open = g
			}
			out[ref] = st
			return nil
		})
		if err != nil {
			return fmt.Errorf("load start policy keys: %w", err)
		}
		return nil
	})
}

// LoadOutcomes reads into out the stored, unexpired outcomes of the
// commands.
func (r *Reads) LoadOutcomes(commandIDs []string, out map[string]wire.Outcome) {
	if len(commandIDs) == 0 {
		return
	}
	r.b.Queue(`SELECT outcome FROM command_outcomes WHERE command_id = ANY($1) AND expires_at > now()`, commandIDs).Query(func(rows pgx.Rows) error {
		var payload []byte
		_, err := pgx.ForEachRow(rows, []any{&payload}, func() error {
			var o wire.Outcome
			if err := json.Unmarshal(payload, &o); err != nil {
				return err
			}
			out[o.CommandID] = o
			return nil
		})
		if err != nil {
			return fmt.Errorf("load command outcomes: %w", err)
		}
		return nil
	})
}

// PolicyWrites are what an apply transaction changes of start policies.
type PolicyWrites struct {
	// Keys are the policy keys whose state the batch changed, written
	// whole.
	Keys map[PolicyRef]*PolicyState
	// Groups are groups the batch opened or changed; Members the starts
	// it added to them.
	Groups  []*DeferredGroup
	Members []DeferredMember
	// Released are groups whose execution began: deleted, with their
	// members, and closed on their keys.
	Released []string
}

func queuePolicyWrites(b *pgx.Batch, shard int, w *PolicyWrites) {
	if len(w.Keys) > 0 {
		n := len(w.Keys)
		names, kinds, keys, throttles := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]*string, 0, n)
		queued, opens, stale := make([]int32, 0, n), make([]*string, 0, n), make([]time.Time, 0, n)
		running, limits := make([]int32, 0, n), make([]int32, 0, n)
		for ref, st := range w.Keys {
			var throttle *string
			if ref.Kind == wire.PolicyThrottle {
				ts := throttleState{Scheduled: micros(st.Scheduled), Begun: micros(st.Begun)}
				if !st.Tail.IsZero() {
					ts.Tail = st.Tail.UnixMicro()
				}
				js, _ := json.Marshal(ts)
				j := string(js)
				throttle = &j
			}
			var open *string
			if st.Open != nil {
				open = &st.Open.GroupID
			}
			names, kinds, keys, throttles = append(names, ref.WorkflowName), append(kinds, ref.Kind), append(keys, ref.Key), append(throttles, throttle)
			queued, opens, stale = append(queued, int32(st.Queued)), append(opens, open), append(stale, st.StaleAt)
			running, limits = append(running, int32(st.Running)), append(limits, int32(st.Limit))
		}
		b.Queue(`INSERT INTO start_policy_keys (workflow_name, kind, policy_key, shard, throttle, queued, open_group, stale_at, running, climit)
			SELECT unnest($1::text[]), unnest($2::text[]), unnest($3::text[]), $4::int, unnest($5::text[])::json, unnest($6::int[]),
				unnest($7::uuid[]), unnest($8::timestamptz[]), unnest($9::int[]), unnest($10::int[])
			ON CONFLICT (workflow_name, kind, policy_key) DO UPDATE SET shard = excluded.shard, throttle = excluded.throttle,
				queued = excluded.queued, open_group = excluded.open_group, stale_at = excluded.stale_at,
				running = excluded.running, climit = excluded.climit`,
			names, kinds, keys, shard, throttles, queued, opens, stale, running, limits)
	}
	if len(w.Groups) > 0 {
		// The rows as JSON, whose members are the columns' names.
		rows, _ := json.Marshal(lastOf(w.Groups, func(g *DeferredGroup) string { return g.GroupID }))
		b.Queue(`INSERT INTO deferred_starts SELECT * FROM json_populate_recordset(NULL::deferred_starts, $1::json)
			ON CONFLICT (group_id) DO UPDATE SET due_at = excluded.due_at, policy = excluded.policy, input = excluded.input,
				completion_callback = excluded.completion_callback, started_by = excluded.started_by, trace_parent = excluded.trace_parent,
				priority = excluded.priority, size = excluded.size, bytes = excluded.bytes`, string(rows))
	}
	if len(w.Members) > 0 {
		n := len(w.Members)
		ids, positions, cmds, seqs, inputs := make([]string, n), make([]int32, n), make([]string, n), make([]int64, n), make([]*string, n)
		for i, m := range w.Members {
			ids[i], positions[i], cmds[i], seqs[i] = m.GroupID, int32(m.Position), m.CommandID, int64(m.StreamSeq)
			if m.Input != nil {
				in := string(m.Input)
				inputs[i] = &in
			}
		}
		b.Queue(`INSERT INTO deferred_start_members (group_id, position, command_id, stream_seq, input)
			SELECT unnest($1::uuid[]), unnest($2::int[]), unnest($3::text[]), unnest($4::bigint[]), unnest($5::text[])::jsonb`,
			ids, positions, cmds, seqs, inputs)
	}
	if len(w.Released) > 0 {
		b.Queue(`DELETE FROM deferred_start_members WHERE group_id = ANY($1::uuid[])`, w.Released)
		b.Queue(`DELETE FROM deferred_starts WHERE group_id = ANY($1::uuid[])`, w.Released)
		b.Queue(`UPDATE start_policy_keys SET open_group = NULL, stale_at = now() WHERE open_group = ANY($1::uuid[])`, w.Released)
	}
}

// DueGroups locks up to limit of the shard's deferred start groups that
// are due at now (only those of ids, when given), in the order they are
// due, with their members in order.
func DueGroups(ctx context.Context, tx Tx, shard int, now time.Time, limit int, ids ...string) ([]*DeferredGroup, map[string][]DeferredMember, error) {
	var only []string
	if len(ids) > 0 {
		only = ids
	}
	rows, err := tx.Query(ctx, `SELECT to_json(g) FROM deferred_starts g
		WHERE g.shard = $1 AND g.due_at <= $2 AND ($4::uuid[] IS NULL OR g.group_id = ANY($4))
		ORDER BY g.due_at, g.first_seq LIMIT $3 FOR UPDATE SKIP LOCKED`, shard, now, limit, only)
	if err != nil {
		return nil, nil, fmt.Errorf("due start groups of shard %d: %w", shard, err)
	}
	var groups []*DeferredGroup
	var raw []byte
	_, err = pgx.ForEachRow(rows, []any{&raw}, func() error {
		g, err := decodeGroup(raw)
		groups = append(groups, g)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("due start groups of shard %d: %w", shard, err)
	}
	if len(groups) == 0 {
		return nil, nil, nil
	}
	gids := make([]string, len(groups))
	for i, g := range groups {
		gids[i] = g.GroupID
	}
	rows, err = tx.Query(ctx, `SELECT group_id::text, position, command_id, stream_seq, input FROM deferred_start_members
		WHERE group_id = ANY($1::uuid[]) ORDER BY group_id, position`, gids)
	if err != nil {
		return nil, nil, fmt.Errorf("members of due start groups: %w", err)
	}
	members := make(map[string][]DeferredMember, len(groups))
	var m DeferredMember
	var seq int64
	_, err = pgx.ForEachRow(rows, []any{&m.GroupID, &m.Position, &m.CommandID, &seq, &m.Input}, func() error {
		m.StreamSeq = uint64(seq)
		members[m.GroupID] = append(members[m.GroupID], m)
		m.Input = nil
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("members of due start groups: %w", err)
	}
	return groups, members, nil
}

// SweepStalePolicyKeys deletes up to limit policy keys that hold nothing
// any more: no open group, no start waiting, no execution running under
// a concurrency key, and no start recent enough to count against a
// throttle.
func SweepStalePolicyKeys(ctx context.Context, db DBTX, limit int) (int64, error) {
	tag, err := db.Exec(ctx, `
		DELETE FROM start_policy_keys WHERE ctid IN (
			SELECT ctid FROM start_policy_keys WHERE open_group IS NULL AND queued = 0 AND running = 0 AND stale_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)`, limit)
	if err != nil {
		return 0, fmt.Errorf("sweep stale start policy keys: %w", err)
	}
	return tag.RowsAffected(), nil
}
