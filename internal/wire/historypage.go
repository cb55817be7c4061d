package wire

// The history a worker fetches, on core NATS (broker.HistoryPageSubject),
// for a workflow task that carries only the execution's latest events
// (WorkflowTask.HistoryFrom) when it does not hold the execution in its
// cache. Ingest and the schedulers answer from PostgreSQL. Nothing
// stores these messages.

// HistoryPageRequest asks for an execution's events from seq From to seq
// To, at most MaxBytes of them (of their types and attributes; at least
// one event however large).
type HistoryPageRequest struct {
	ExecutionID string `json:"execution_id"`
	From        int    `json:"from"`
	To          int    `json:"to"`
	MaxBytes    int    `json:"max_bytes"`
}

// HistoryPageReply answers a HistoryPageRequest: the events, in order,
// from its From on; More says events up to its To are left, to ask for
// next. NotFound says there is no such execution (it was pruned), Error
// why the page could not be read.
type HistoryPageReply struct {
	Events   []Event `json:"events"`
	More     bool    `json:"more,omitempty"`
	NotFound bool    `json:"not_found,omitempty"`
	Error    string  `json:"error,omitempty"`
}
