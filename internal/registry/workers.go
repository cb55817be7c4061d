package registry

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/dedup"
)

// Record is the value of a worker's record key (RecordKey): who the
// worker is, what it registered and its load, as of its last put. Its
// Entry members are those of a name key's value, so that a reader of
// entries decodes a record too.
type Record struct {
	Entry
	// PID is the worker's process id on Host.
	PID int `json:"pid"`
	// Build is the worker binary's main module version and VCS revision
	// (BuildOf), "(devel)" when the build recorded neither.
	Build     string `json:"build"`
	TaskQueue string `json:"task_queue"`
	// Workflows and Activities are the names the worker registered.
	Workflows  []string `json:"workflows"`
	Activities []string `json:"activities"`
	// Load is the worker's slots as of the put; nil when it reports none
	// (RegistrarConfig.Load unset).
	Load *Load `json:"load,omitempty"`
	// ReplayRefused are the workflows the worker registered in its code
	// but does not serve, because its replay check found a running
	// execution whose history does not replay on that code.
	ReplayRefused []Refusal `json:"replay_refused,omitempty"`
}

// Refusal is a workflow a worker's replay check refused: the execution
// whose history did not replay on the worker's code, and how.
type Refusal struct {
	Workflow string `json:"workflow"`
	// Reason is wire.TaskFailedNondeterminism,
	// wire.TaskFailedVersionUnsupported or wire.TaskFailedPanic.
	Reason      string `json:"reason"`
	ExecutionID string `json:"execution_id"`
	// Message says where the replay diverged: the event, what the
	// history has and what the code asked for (cut to a few KiB, as a
	// task failure's).
	Message string `json:"message"`
	// EventSeq is the history event at which it diverged, 0 when not
	// known (a panic, an unsupported version).
	EventSeq int `json:"event_seq,omitempty"`
}

// Load is how many of a worker's slots are in use: workflow tasks it
// runs at once, and activity attempts.
type Load struct {
	WorkflowSlots     int `json:"workflow_slots"`
	WorkflowSlotsUsed int `json:"workflow_slots_used"`
	ActivitySlots     int `json:"activity_slots"`
	ActivitySlotsUsed int `json:"activity_slots_used"`
}

// Worker is a live worker, as Workers reads it from the bucket.
type Worker struct {
	Record
	// HeartbeatAt is when the bucket took the worker's newest put (the
	// server's clock).
	HeartbeatAt time.Time
	// Partial says the worker put no record (one of a version before
	// records): only the Entry members, TaskQueue, Workflows, Activities
	// and HeartbeatAt are known, from its name keys.
	Partial bool
}

// Workers reads the bucket itself: the workers live at now, with what
// they serve (names sorted), by task queue, host and id. A worker's record says who it
// is; a worker that put no record (an older version) is told from its
// name keys, marked Partial.
func Workers(ctx context.Context, kv jetstream.KeyValue, now time.Time) ([]Worker, error) {
	entries, err := scan(ctx, kv, ">")
	if err != nil {
		return nil, fmt.Errorf("list workers in %s: %w", kv.Bucket(), err)
	}
	records := map[string]Worker{}
	partial := map[string]*Worker{}
	for _, e := range entries {
		if kind, name, queue, id, ok := nameKey(e.Key()); ok {
			ent, err := decodeEntry(e.Value())
			if err != nil || !ent.Live(now) {
				continue
			}
			w := partial[id]
			if w == nil {
				w = &Worker{Record: Record{Entry: ent, TaskQueue: queue}, Partial: true}
				partial[id] = w
			}
			w.Entry.Worker = id
			if ent.ExpiresAt.After(w.ExpiresAt) {
				w.ExpiresAt, w.Host = ent.ExpiresAt, cmp.Or(ent.Host, w.Host)
			}
			if e.Created().After(w.HeartbeatAt) {
				w.HeartbeatAt = e.Created()
			}
			if kind == KindWorkflow {
				w.Workflows = append(w.Workflows, name)
			} else {
				w.Activities = append(w.Activities, name)
			}
			continue
		}
		prefix, id, ok := splitKey(e.Key())
		if !ok || prefix != RecordPrefix {
			continue
		}
		var r Record
		if json.Unmarshal(e.Value(), &r) != nil || !r.Live(now) {
			continue
		}
		r.Worker = id
		records[id] = Worker{Record: r, HeartbeatAt: e.Created()}
	}
	out := make([]Worker, 0, len(records)+len(partial))
	for _, w := range records {
		out = append(out, w)
	}
	for id, w := range partial {
		if _, ok := records[id]; ok {
			continue
		}
		out = append(out, *w)
	}
	for i := range out {
		out[i].Workflows = slices.Sorted(slices.Values(out[i].Workflows))
		out[i].Activities = slices.Sorted(slices.Values(out[i].Activities))
		out[i].Workflows = nonNil(out[i].Workflows)
		out[i].Activities = nonNil(out[i].Activities)
	}
	slices.SortFunc(out, func(a, b Worker) int {
		return cmp.Or(cmp.Compare(a.TaskQueue, b.TaskQueue), cmp.Compare(a.Host, b.Host), cmp.Compare(a.Worker, b.Worker))
	})
	return out, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Devel is the build of a binary that recorded no version nor revision.
const Devel = "(devel)"

// DefaultBuildID is the build id of a worker whose configuration sets
// none: the binary's build (BuildOf, "devel" for "(devel)") and the first
// 8 hex digits of a SHA-256 of the workflow names it registers, sorted,
// so that two binaries with the same revision but other workflows (the
// example worker, a user's) differ.
func DefaultBuildID(build string, workflows []string) string {
	names := slices.Sorted(slices.Values(workflows))
	sum := sha256.Sum256([]byte(strings.Join(names, "\n")))
	build = strings.NewReplacer("(devel)", "devel").Replace(build)
	id := build + "~" + hex.EncodeToString(sum[:4])
	if dedup.ValidateBuildID(id) != nil {
		// A module version with characters a build id refuses: the
		// hash alone still tells builds apart by their workflows.
		id = "build~" + hex.EncodeToString(sum[:4])
	}
	return id
}

// BuildOf describes a build in one token: the main module's version,
// with the VCS revision it was built from (12 digits) and "dirty" when
// the checkout had uncommitted changes as semver build metadata, unless
// the version holds them already (as the go command stamps a build of a
// checkout): "v1.4.0", "v1.4.0+75549c2a1b3c", "(devel)+75549c2a1b3c.dirty",
// "v0.0.0-20260304050607-75549c2a1b3c+dirty". Devel when info records
// neither version nor revision.
func BuildOf(info *debug.BuildInfo) string {
	if info == nil {
		return Devel
	}
	version := cmp.Or(info.Main.Version, Devel)
	var meta []string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision" && s.Value != "":
			rev := s.Value[:min(len(s.Value), 12)]
			if !strings.Contains(version, rev) {
				meta = append([]string{rev}, meta...)
			}
		case s.Key == "vcs.modified" && s.Value == "true" && !strings.Contains(version, "dirty"):
			meta = append(meta, "dirty")
		}
	}
	if len(meta) == 0 {
		return version
	}
	sep := "+"
	if strings.Contains(version, "+") {
		sep = "."
	}
	return version + sep + strings.Join(meta, ".")
}
