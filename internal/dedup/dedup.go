package dedup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/harvest-engine/harvest/internal/storable"
)

// MaxKeyBytes is the longest idempotency key accepted, after trimming.
const MaxKeyBytes = 512

// ReservedKeyPrefix starts the keys of messages taken from NATS subject
// bindings, derived from their coordinates or their Nats-Msg-Id (ConnKey,
// ConnMsgIDKey); callers may not send one.
const ReservedKeyPrefix = "conn:"

// HookKeyPrefix starts the keys of webhook deliveries, "hook:{source}:{id}":
// a namespace API callers cannot write to either.
const HookKeyPrefix = "hook:"

// Errors returned by ValidateKey; match them with errors.Is.
var (
	ErrKeyEmpty    = errors.New("idempotency key is empty")
	ErrKeyTooLong  = errors.New("idempotency key is too long")
	ErrKeyReserved = errors.New("idempotency key uses a reserved prefix")
	// ErrKeyText: the key holds U+0000, a control character or bytes
	// that are not UTF-8 (see storable.CheckIdentifier).
	ErrKeyText = errors.New("idempotency key is not text Harvest accepts")
)

// ValidateKey trims a caller-supplied idempotency key and checks it. It
// returns the trimmed key, or an error wrapping one of ErrKeyEmpty,
// ErrKeyTooLong, ErrKeyText or ErrKeyReserved.
func ValidateKey(raw string) (string, error) {
	key := strings.TrimSpace(raw)
	switch {
	case key == "":
		return "", ErrKeyEmpty
	case len(key) > MaxKeyBytes:
		return "", fmt.Errorf("%w: %d bytes, at most %d", ErrKeyTooLong, len(key), MaxKeyBytes)
	}
	if err := storable.CheckIdentifier(key); err != nil {
		return "", fmt.Errorf("%w: it %w", ErrKeyText, err)
	}
	switch {
	case strings.HasPrefix(key, ReservedKeyPrefix):
		return "", fmt.Errorf("%w %q", ErrKeyReserved, ReservedKeyPrefix)
	case strings.HasPrefix(key, HookKeyPrefix):
		return "", fmt.Errorf("%w %q", ErrKeyReserved, HookKeyPrefix)
	}
	return key, nil
}

// namespace seeds the name-based UUIDs Harvest derives; changing it would
// change every derived id, so it is fixed forever.
var namespace = uuid.MustParse("5b0f4a52-6c1e-4f0e-9d59-1f6a0e7c2d11")

// derive returns a name-based (version 5) UUID over the parts, each
// length-prefixed so that no two different part lists collide.
func derive(parts ...string) string {
	var b []byte
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return uuid.NewSHA1(namespace, b).String()
}

// HookKey is the idempotency key of a webhook delivery.
func HookKey(source, deliveryID string) string {
	return HookKeyPrefix + source + ":" + deliveryID
}

// ConnKey is the idempotency key of a message a NATS subject binding takes
// from a stream when the message carries no Nats-Msg-Id: its coordinates,
// the binding's name, the stream and the stream sequence. The name and the
// stream are length-prefixed, "conn:<len>:<binding>:<len>:<stream>:<seq>"
// (for instance "conn:6:orders:6:ORDERS:42"), so no two coordinates give
// the same key whatever bytes the names hold. The key lives in the reserved
// "conn:" namespace, which ValidateKey refuses to API callers.
func ConnKey(binding, stream string, seq uint64) string {
	b := make([]byte, 0, len(ReservedKeyPrefix)+len(binding)+len(stream)+32)
	b = append(b, ReservedKeyPrefix...)
	b = appendPrefixed(b, binding)
	b = appendPrefixed(b, stream)
	return string(strconv.AppendUint(b, seq, 10))
}

// ConnMsgIDKey is the idempotency key of a message a NATS subject binding
// takes from a stream when the message carries a Nats-Msg-Id: the id,
// namespaced under the binding, "conn:<len>:<binding>:id:<msg id>" (for
// instance "conn:6:orders:id:evt-1"). Two bindings' ids never collide, an
// id never collides with coordinates (ConnKey has a length where this has
// "id"), and API callers cannot forge one, the "conn:" namespace being
// reserved.
func ConnMsgIDKey(binding, msgID string) string {
	b := make([]byte, 0, len(ReservedKeyPrefix)+len(binding)+len(msgID)+16)
	b = append(b, ReservedKeyPrefix...)
	b = appendPrefixed(b, binding)
	b = append(b, "id:"...)
	return string(append(b, msgID...))
}

// appendPrefixed appends "<len(s)>:<s>:".
func appendPrefixed(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	b = append(b, s...)
	return append(b, ':')
}

// StartCommandID is the command id of a keyed start: a pure function of the
// workflow name and the idempotency key, so every retry of one delivery
// carries the same Nats-Msg-Id and the broker drops the duplicates.
func StartCommandID(workflowName, key string) string {
	return derive("start", workflowName, key)
}

// SignalCommandID is the command id of a keyed signal: a pure function of
// the execution and the key, so retries carry the same Nats-Msg-Id.
func SignalCommandID(executionID, key string) string {
	return derive("signal", executionID, key)
}

// UpdateCommandID is the command id, and the update id, of a keyed
// update asked of an execution: a retry is the same command.
func UpdateCommandID(executionID, key string) string {
	return derive("update", executionID, key)
}

// SignalWithStartCommandID is the command id of a keyed signal-with-start.
func SignalWithStartCommandID(workflowName, workflowID, key string) string {
	return derive("signal-with-start", workflowName, workflowID, key)
}

// TerminateCommandID is the command id of a termination: a pure function
// of the execution, so a retried termination carries the same
// Nats-Msg-Id and the broker drops it, and its answer is the first one's
// outcome (the execution Terminated, or as it had closed). A
// cancellation's id is fresh each time instead: its answer is the
// execution as it stands (asked to cancel, or closed since), and the
// scheduler records one request however often it is sent.
func TerminateCommandID(executionID string) string {
	return derive("terminate", executionID)
}

// BatchItemCommandID identifies the command batch batchID sends to
// execution executionID: a part that sends it again (its outbox
// published twice) sends the same command.
func BatchItemCommandID(batchID, executionID string) string {
	return derive("batch", batchID, executionID)
}

// BatchPartCommandID identifies the command that creates or cancels (op)
// batch batchID's part on shard.
func BatchPartCommandID(op, batchID string, shard int) string {
	return derive("batch-"+op, batchID, fmt.Sprint(shard))
}

// WorkflowTaskCommandID identifies the completion of one workflow task: a
// worker that runs the same task twice sends the same id.
func WorkflowTaskCommandID(executionID string, taskID int) string {
	return derive("wft", executionID, fmt.Sprint(taskID))
}

// WorkflowTaskFailedCommandID identifies the failure of one workflow
// task of an execution.
func WorkflowTaskFailedCommandID(executionID string, taskID int) string {
	return derive("wftf", executionID, fmt.Sprint(taskID))
}

// ActivityResultCommandID identifies the result of one activity attempt.
func ActivityResultCommandID(executionID string, activityID, attempt int) string {
	return derive("activity", executionID, fmt.Sprint(activityID), fmt.Sprint(attempt))
}

// HeartbeatCommandID identifies the n-th heartbeat of an activity attempt.
func HeartbeatCommandID(executionID string, activityID, attempt, n int) string {
	return derive("heartbeat", executionID, fmt.Sprint(activityID), fmt.Sprint(attempt), fmt.Sprint(n))
}

// TaskMsgID is the message id of a task published from the outbox; the
// outbox row id is unique per task, so a re-flushed row is dropped.
func TaskMsgID(shard int, outboxID int64) string {
	return fmt.Sprintf("task:%d:%d", shard, outboxID)
}

// NewID returns a fresh, time-ordered UUID (version 7) for command ids,
// execution ids and generated workflow ids.
func NewID() string {
	return uuid.Must(uuid.NewV7()).String()
}
