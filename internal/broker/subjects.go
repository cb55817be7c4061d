package broker

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/harvest-engine/harvest/internal/wire"
)

// CommandSubject is the subject of a command of kind for shard:
// harvest.cmd.<shard>.<kind>.
func CommandSubject(shard int, kind string) string {
	return "harvest.cmd." + strconv.Itoa(shard) + "." + kind
}

// CommandFilter matches every command of one shard.
func CommandFilter(shard int) string {
	return "harvest.cmd." + strconv.Itoa(shard) + ".>"
}

// TaskSubject is the subject tasks of kind on a task queue had before
// they were routed by name: harvest.task.<queue>.<kind>. Schedulers
// publish to NameTaskSubject; workers still drain this subject, for tasks
// an older scheduler wrote.
func TaskSubject(queue, kind string) string {
	return "harvest.task." + queue + "." + kind
}

// NameTaskSubject is the subject of a task of kind (wire.TaskWorkflow,
// wire.TaskActivity) for the workflow or activity name on a task queue:
// harvest.task.<queue>.<kind>.<name>. Only the workers that register name
// on queue consume it. Queue and names are validated by
// dedup.ValidateName, so they are safe subject tokens.
func NameTaskSubject(queue, kind, name string) string {
	return "harvest.task." + queue + "." + kind + "." + name
}

// PriorityTaskSubject is NameTaskSubject for a task of priority
// (wire.MinPriority to wire.MaxPriority; 0 is wire.DefaultPriority): the
// default priority's subject is NameTaskSubject itself, any other one
// more token, harvest.task.<queue>.<kind>.<name>.p<priority>. Each level
// has a consumer of its own, and a worker pulls a higher level's first
// (docs/start-policies.md#priorities): JetStream delivers a consumer's
// messages in stream order, so only subjects can order them.
func PriorityTaskSubject(queue, kind, name string, priority int) string {
	subject := NameTaskSubject(queue, kind, name)
	if priority == 0 || priority == wire.DefaultPriority {
		return subject
	}
	return subject + priorityToken(priority)
}

func priorityToken(priority int) string { return ".p" + strconv.Itoa(priority) }

// TaskPriority is the priority of a task that came on subject: the
// level of a PriorityTaskSubject, wire.DefaultPriority for any other
// task subject (sticky, pinned and unrouted ones included).
func TaskPriority(subject string) int {
	i := strings.LastIndexByte(subject, '.')
	if i < 0 || len(subject) != i+3 || subject[i+1] != 'p' {
		return wire.DefaultPriority
	}
	n := int(subject[i+2] - '0')
	if n < wire.MinPriority || n > wire.MaxPriority {
		return wire.DefaultPriority
	}
	return n
}

// PinnedTaskSubject is the subject of a workflow task of an execution
// pinned to build (docs/versioning.md#pinned-workflows):
// harvest.task.<queue>.workflow.<name>.<BuildToken(build)>. Only the
// workers of that build that register name on queue consume it. It does
// not match NameTaskSubject's filter, so a pinned task goes to no other
// build.
func PinnedTaskSubject(queue, name, build string) string {
	return NameTaskSubject(queue, wire.TaskWorkflow, name) + "." + BuildToken(build)
}

// StickyTaskSubject is the subject of a workflow task of workflow name
// sent to the one worker that holds its execution in its cache
// (docs/long-workflows.md#sticky-workflow-tasks):
// harvest.task.<queue>.workflow.<name>.s<worker>, worker being the
// worker's id (a UUID). Only that worker's sticky consumer of the
// workflow (StickyConsumerName) takes it; it matches no shared or pinned
// filter.
func StickyTaskSubject(queue, name, worker string) string {
	return NameTaskSubject(queue, wire.TaskWorkflow, name) + ".s" + worker
}

// StickyConsumerName is the consumer of worker's sticky tasks of
// workflow name on queue: the worker creates it and pulls it while its
// build is the newest of the workflow's, and the server removes it soon
// after the worker stops pulling; the scheduler asks it whether the
// worker took a task.
func StickyConsumerName(queue, name, worker string) string {
	sum := sha256.Sum256([]byte(queue + "\x00" + name + "\x00" + worker))
	return "harvest_sticky_" + hex.EncodeToString(sum[:16])
}

// BuildToken is a build id as one subject and consumer-name token: "b"
// and 16 hex digits of its SHA-256. A build id may hold '.', which a
// subject token cannot.
func BuildToken(build string) string {
	sum := sha256.Sum256([]byte(build))
	return "b" + hex.EncodeToString(sum[:8])
}

// TaskKind is the kind of task (wire.TaskWorkflow, wire.TaskActivity) a
// task subject, routed by name or not, carries; false for a subject that
// is no task's.
func TaskKind(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, "harvest.task.")
	if !ok {
		return "", false
	}
	tokens := strings.Split(rest, ".")
	// A pinned or sticky workflow task, or a task of a priority other than
	// the default, has one token more than its name.
	longer := len(tokens) == 4 && (tokens[1] == wire.TaskWorkflow || TaskPriority(subject) != wire.DefaultPriority)
	if len(tokens) != 2 && len(tokens) != 3 && !longer {
		return "", false
	}
	return tokens[1], true
}

// TaskQueueFilter matches every task of a task queue, by name or not.
func TaskQueueFilter(queue string) string {
	return "harvest.task." + queue + ".>"
}

// OutcomeSubject is the core NATS subject on which the scheduler announces
// a command's outcome once the transaction that stored it has committed:
// harvest.outcome.<command_id>. Nothing stores these messages; a reader
// that missed one reads the outcome from PostgreSQL.
func OutcomeSubject(commandID string) string {
	return outcomePrefix + commandID
}

const outcomePrefix = "harvest.outcome."

// StateSubject is the core NATS subject on which the scheduler announces
// that execution's query states changed, once the transaction that stored
// them has committed: harvest.state.<execution_id>. The message carries
// nothing; nothing stores it, and a reader that missed one reads the
// states from PostgreSQL.
func StateSubject(executionID string) string {
	return statePrefix + executionID
}

const statePrefix = "harvest.state."

// StateSubjects matches every query state announcement.
const StateSubjects = statePrefix + ">"

// StateExecutionID returns the execution id of a state subject, "" for
// another subject.
func StateExecutionID(subject string) string {
	id, ok := strings.CutPrefix(subject, statePrefix)
	if !ok {
		return ""
	}
	return id
}

// CancelledSubject is the put subject announcing a cancelled execution.
func CancelledSubject(executionID string) string {
	return "$KV." + CancelledBucket + "." + executionID
}

// CancelRequestedSubject is the subject of the key, in the bucket of
// cancelled executions, that says an execution was asked to cancel
// (<execution_id>.cancel_requested): a worker cancels the eager attempts
// it runs for it, which hold the workflow task in which the workflow
// code would learn of the request.
func CancelRequestedSubject(executionID string) string {
	return CancelledSubject(executionID) + ".cancel_requested"
}

// CancelledActivitySubject is the subject of the key, in the bucket of
// cancelled executions, that says the workflow gave up one activity
// (request_cancel_activity): <execution_id>.<activity_id>. A worker
// running its attempt cancels the attempt's context.
func CancelledActivitySubject(executionID string, activityID int) string {
	return CancelledSubject(executionID) + "." + strconv.Itoa(activityID)
}

// UpdateSubject is the core NATS subject on which the scheduler
// announces that an update changed (its status, as the message's body)
// once the transaction that changed it has committed:
// harvest.update.<update_id>. Nothing stores these messages; a reader
// that missed one reads the update from PostgreSQL.
func UpdateSubject(updateID string) string {
	return updatePrefix + updateID
}

const updatePrefix = "harvest.update."

// UpdateSubjects matches every update announcement.
const UpdateSubjects = updatePrefix + ">"

// UpdateID returns the update id of an update subject, "" for another.
func UpdateID(subject string) string {
	id, _ := strings.CutPrefix(subject, updatePrefix)
	if id == subject {
		return ""
	}
	return id
}

// OutcomeSubjects matches every outcome announcement.
const OutcomeSubjects = outcomePrefix + ">"

// OutcomeCommandID returns the command id of an outcome subject.
func OutcomeCommandID(subject string) string {
	if len(subject) > len(outcomePrefix) && subject[:len(outcomePrefix)] == outcomePrefix {
		return subject[len(outcomePrefix):]
	}
	return ""
}

// PruneSubject is the core NATS subject on which ingest asks every
// scheduler to prune now (POST /api/harvest/retention/prune): each one
// subscribes, wakes its pruner for the shards it holds, and answers the
// request, so that ingest knows at least one heard it. Nothing stores
// these messages: a scheduler that misses one prunes at its next interval.
const PruneSubject = "harvest.retention.prune"

// The replay check's requests (harvest.WorkerConfig.ReplayCheck): a
// starting worker asks ingest, which reads PostgreSQL, for a sample of a
// workflow's running executions and for each one's history, on core NATS.
// Every ingest process answers in ReplayCheckQueue, so that one of them
// answers each request; nothing stores these messages, and a worker that
// no ingest answers skips its check.
const (
	// ReplaySampleSubject takes a wire.ReplaySampleRequest and answers a
	// wire.ReplaySampleReply.
	ReplaySampleSubject = "harvest.replaycheck.sample"
	// ReplayHistorySubject takes a wire.ReplayHistoryRequest and answers
	// a wire.ReplayHistoryReply.
	ReplayHistorySubject = "harvest.replaycheck.history"
	// ReplayCheckQueue is the queue group ingest answers them in.
	ReplayCheckQueue = "harvest_ingest"
)

// HistoryPageSubject is the core NATS subject on which a worker asks for
// a page of the history of an execution of store (its task's shard's):
// harvest.history.<store>. It takes a wire.HistoryPageRequest and answers
// a wire.HistoryPageReply. Ingest (for every store) and the schedulers
// (for their own) answer in HistoryPageQueue, so that one process answers
// each request.
func HistoryPageSubject(store int) string {
	return "harvest.history." + strconv.Itoa(store)
}

// HistoryPageQueue is the queue group history pages are answered in.
const HistoryPageQueue = "harvest_history"
