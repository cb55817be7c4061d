package api

import "time"

// Worker is one live worker of GET /api/harvest/workers: a worker
// process that has registered on a task queue and renewed its
// registration within the registration TTL (worker_ttl, 30 s).
type Worker struct {
	// ID is the worker's id, new at each start of the process.
	ID   string `json:"id"`
	Host string `json:"host"`
	// PID, Build, StartedAt and Slots are absent for a worker of a
	// version before workers said who they are: only its id, host, task
	// queue, names and heartbeat are known.
	PID int `json:"pid,omitempty"`
	// Build is the worker binary's module version, with the VCS revision
	// it was built from and "dirty" for uncommitted changes as build
	// metadata ("v1.4.0+75549c2a1b3c", "(devel)+75549c2a1b3c.dirty"), or
	// "(devel)" when the build recorded neither; one token.
	Build string `json:"build,omitempty"`
	// BuildID is the build id the workflow tasks it completes record
	// (WorkerConfig.BuildID, or one made from Build and a hash of its
	// workflows' names).
	BuildID   string    `json:"build_id,omitempty"`
	StartedAt time.Time `json:"started_at,omitzero"`
	TaskQueue string    `json:"task_queue"`
	// Workflows and Activities are the names it registered, sorted. For a
	// token limited to some workflows, Workflows holds only those.
	Workflows  []string `json:"workflows"`
	Activities []string `json:"activities"`
	// Slots is how busy it was at its last heartbeat; absent when it does
	// not say.
	Slots *WorkerSlots `json:"slots,omitempty"`
	// LastHeartbeatAt is when it last renewed its registration (every
	// third of the TTL, 10 s by default), by NATS's clock.
	LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
	// ReplayRefused are the workflows its code registers that it does
	// not take: its replay check (WorkerConfig.ReplayCheck) found a
	// running execution whose history does not replay on that code, so
	// their tasks stay with the workers that take them. Absent when it
	// refused none. For a token limited to some workflows, only those.
	ReplayRefused []ReplayRefusal `json:"replay_refused,omitempty"`
}

// ReplayRefusal is a workflow a worker's replay check refused, and the
// execution whose history did not replay on its code.
type ReplayRefusal struct {
	Workflow string `json:"workflow"`
	// Reason is nondeterminism (the code decided otherwise than the
	// history records), version_unsupported (the history took a version
	// of a change the code no longer supports) or panic (the workflow
	// code panicked), as an execution's task_failing says.
	Reason      string `json:"reason"`
	ExecutionID string `json:"execution_id"`
	// Message says where the replay diverged: the history event, what
	// the history has and what the code asked for.
	Message string `json:"message"`
	// EventSeq is the history event where it diverged; absent when not
	// known (a panic, an unsupported version).
	EventSeq int `json:"event_seq,omitempty"`
}

// WorkerSlots are a worker's slots: workflow tasks it runs at once, and
// activity attempts.
type WorkerSlots struct {
	Workflow SlotUsage `json:"workflow"`
	Activity SlotUsage `json:"activity"`
}

// SlotUsage is how many of Size slots are Used.
type SlotUsage struct {
	Used int `json:"used"`
	Size int `json:"size"`
}

// ListWorkersResponse answers GET /api/harvest/workers: the live
// workers, by task queue, host and id.
type ListWorkersResponse struct {
	Workers []Worker `json:"workers"`
}

// TaskQueueResponse answers GET /api/harvest/task-queues/{name}: each
// workflow and activity of a task queue with its backlog and the live
// workers that serve it. A name is listed when it has tasks waiting or a
// live worker registered it on the queue; a name with a backlog and no
// worker ("workers": []) is one whose executions wait for a worker.
type TaskQueueResponse struct {
	TaskQueue string `json:"task_queue"`
	// Workflows and Activities are by name. For a token limited to some
	// workflows, Workflows holds only those.
	Workflows  []NameBacklog `json:"workflows"`
	Activities []NameBacklog `json:"activities"`
	// UnroutedBacklog counts the queue's tasks written before tasks were
	// routed by name (by a scheduler of an older version), which any
	// worker of the queue takes, by kind.
	UnroutedBacklog UnroutedBacklog `json:"unrouted_backlog"`
}

// NameBacklog is a workflow or activity of a task queue.
type NameBacklog struct {
	Name string `json:"name"`
	// Backlog is how many of its tasks the task stream holds: waiting for
	// a worker, or taken by one and not settled yet. A workflow task is
	// one step of an execution, an activity task one attempt.
	Backlog int64 `json:"backlog"`
	// Workers are the ids of the live workers that registered it on the
	// queue (GET /api/harvest/workers tells who they are); empty when
	// none does.
	Workers []string `json:"workers"`
}

// UnroutedBacklog counts a task queue's unrouted tasks by kind.
type UnroutedBacklog struct {
	Workflow int64 `json:"workflow"`
	Activity int64 `json:"activity"`
}
