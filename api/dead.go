package api

import (
	"encoding/json"
	"time"
)

// DeadCommand is a command the scheduler could not apply for a reason
// that retrying would not fix, set aside so that the rest of its shard
// went on (GET /api/harvest/commands/dead). Its outcome, at GET
// /api/harvest/commands/{command_id}, is the error command_rejected.
type DeadCommand struct {
	ID        int64  `json:"id"`
	Shard     int    `json:"shard"`
	StreamSeq uint64 `json:"stream_seq"`
	// CommandID is empty when the message carried none that decodes.
	CommandID string `json:"command_id,omitempty"`
	Kind      string `json:"kind"`
	Subject   string `json:"subject"`
	// Error is malformed (the message is no command) or unappliable
	// (PostgreSQL refused what it carries); Reason says more.
	Error  string    `json:"error"`
	Reason string    `json:"reason"`
	DeadAt time.Time `json:"dead_at"`
	// The message as it came, sent by GET /api/harvest/commands/dead/{id}
	// only: Payload when it is JSON, else PayloadBase64.
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 string          `json:"payload_base64,omitempty"`
}
