package devstack

import (
	"errors"
	"fmt"
	"net"

	"github.com/harvest-engine/harvest/internal/broker"
)

// ErrStateDirInUse is wrapped by Start's error when another stack, in
// this process or another, runs on the state dir.
var ErrStateDirInUse = errors.New("in use by another harvest dev")

// What a ListenError's address is for.
const (
	ServiceAPI  = "the HTTP API"
	ServiceNATS = "the embedded NATS server"
)

// ListenError is Start's error when an address the stack would listen on
// cannot be had (another process holds it); Start returns it before it
// starts NATS or PostgreSQL.
type ListenError struct {
	// Service is ServiceAPI or ServiceNATS.
	Service string
	Addr    string
	Err     error
}

func (e *ListenError) Error() string {
	why := e.Err.Error()
	if op := (*net.OpError)(nil); errors.As(e.Err, &op) && op.Err != nil {
		why = op.Err.Error() // without the address again
	}
	return fmt.Sprintf("%s cannot listen on %s: %s", e.Service, e.Addr, why)
}

func (e *ListenError) Unwrap() error { return e.Err }

// ShardsError is Start's error when Streams.Shards differs from the count
// the stack's streams were created with, which is theirs for life.
type ShardsError struct {
	// StateDir holds the streams; empty when NATS is not embedded.
	StateDir string
	// Have is the streams' count, Want the configured one.
	Have, Want int
}

func (e *ShardsError) Error() string {
	if e.StateDir != "" {
		return fmt.Sprintf("state dir %s was created with %s, which it keeps for life; the stack is configured with %s",
			e.StateDir, shardCount(e.Have), shardCount(e.Want))
	}
	return fmt.Sprintf("the NATS server's streams were created with %s, which they keep for life; the stack is configured with %s",
		shardCount(e.Have), shardCount(e.Want))
}

// Unwrap makes errors.Is(err, broker.ErrShardMismatch) hold.
func (e *ShardsError) Unwrap() error { return broker.ErrShardMismatch }

func shardCount(n int) string {
	if n == 1 {
		return "1 shard"
	}
	return fmt.Sprintf("%d shards", n)
}
