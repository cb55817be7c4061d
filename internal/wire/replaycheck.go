package wire

import "encoding/json"

// The replay check's messages (harvest.WorkerConfig.ReplayCheck), on core
// NATS between a starting worker and ingest (broker.ReplaySampleSubject,
// broker.ReplayHistorySubject). They are not stored: an older ingest that
// does not answer them makes a worker skip its check.

// MaxReplaySample is the most executions a ReplaySampleRequest may ask
// for (harvesttype.MaxReplayCheckSample is the same).
const MaxReplaySample = 1000

// ReplaySampleRequest asks for up to Limit running executions of
// Workflow on TaskQueue, the newest first.
type ReplaySampleRequest struct {
	Workflow  string `json:"workflow"`
	TaskQueue string `json:"task_queue"`
	Limit     int    `json:"limit"`
}

// ReplaySampleReply is the answer to a ReplaySampleRequest: the
// executions' ids, or why there are none to give.
type ReplaySampleReply struct {
	ExecutionIDs []string `json:"execution_ids"`
	Error        string   `json:"error,omitempty"`
}

// ReplayHistoryRequest asks for one execution's history.
type ReplayHistoryRequest struct {
	ExecutionID string `json:"execution_id"`
}

// ReplayHistoryReply is the answer to a ReplayHistoryRequest: the
// execution and its history, or why not. TooLarge says the answer would
// be larger than the NATS server carries (its max payload): the history
// cannot be checked this way.
type ReplayHistoryReply struct {
	History  *ReplayHistory `json:"history,omitempty"`
	Error    string         `json:"error,omitempty"`
	TooLarge bool           `json:"too_large,omitempty"`
}

// ReplayHistory is an execution's history as the replay check replays
// it: the events as stored, their attributes byte for byte (the HTTP
// route's events are decoded into maps, which would round numbers
// beyond 2^53, and a replay compares values exactly).
type ReplayHistory struct {
	ExecutionID  string  `json:"execution_id"`
	WorkflowName string  `json:"workflow_name"`
	WorkflowID   string  `json:"workflow_id"`
	TaskQueue    string  `json:"task_queue"`
	Status       string  `json:"status"`
	Events       []Event `json:"events"`
}

// ReplayTask is the workflow task a worker would run next over history,
// the events of an execution (oldest first): the task after the last
// WorkflowTaskCompleted, at the time of the last event. Replaying it
// checks every decision the history records against what the code
// decides; the replay check and harvesttest.ReplayHistories both replay
// this task.
func ReplayTask(executionID, workflowName, workflowID, taskQueue string, history []Event) *WorkflowTask {
	task := &WorkflowTask{ExecutionID: executionID, WorkflowName: workflowName, WorkflowID: workflowID, TaskQueue: taskQueue, History: history}
	for _, ev := range history {
		if ev.Type != EventWorkflowTaskCompleted {
			continue
		}
		var a WorkflowTaskCompletedAttrs
		if err := json.Unmarshal(ev.Attrs, &a); err == nil && a.TaskID > task.TaskID {
			task.TaskID = a.TaskID
		}
	}
	task.TaskID++
	if len(history) > 0 {
		task.Time = history[len(history)-1].At
	}
	return task
}
