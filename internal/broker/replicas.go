package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrReplicasUnplaceable is matched (errors.Is) by the error Declare
// returns when NATS cannot place a stream or bucket with the configured
// replicas: the server is not clustered, or its cluster has fewer servers
// (or fewer online) than the replicas asked for. The error is a
// *ReplicasError.
var ErrReplicasUnplaceable = errors.New("replicas cannot be placed")

// JetStream's error codes for a placement it refuses.
const (
	// errCodeReplicasNotSupported: "replicas > 1 not supported in
	// non-clustered mode".
	errCodeReplicasNotSupported jetstream.ErrorCode = 10074
	// errCodeNoPeers: "no suitable peers for placement", and why.
	errCodeNoPeers jetstream.ErrorCode = 10005
	// peerOfflineReason is in errCodeNoPeers' description when a peer that
	// could have taken a replica is offline.
	peerOfflineReason = "peer offline"
	// errCodeStorageExceeded and errCodeMemoryExceeded: "insufficient
	// storage (memory) resources available", when the server cannot
	// reserve a stream's max bytes.
	errCodeStorageExceeded jetstream.ErrorCode = 10047
	errCodeMemoryExceeded  jetstream.ErrorCode = 10028
)

// ErrInsufficientStorage is matched (errors.Is) by the error Declare
// returns when the NATS server cannot reserve a stream's max bytes: the
// streams' max bytes together exceed what its JetStream may store
// (max_file_store, by default three quarters of the disk free when it
// started) or the account's limit. Retrying does not mend it.
var ErrInsufficientStorage = errors.New("the NATS server cannot reserve the stream's max bytes")

// maxBytesKeys name the configuration keys that size the streams with a
// configurable max bytes, for the error that says they do not fit.
var maxBytesKeys = map[string]string{
	CommandStream: "nats_command_stream_max_bytes",
	TaskStream:    "nats_task_stream_max_bytes",
}

// ReplicasError says which stream NATS could not place with how many
// replicas, and how large the cluster is.
type ReplicasError struct {
	// Stream is the JetStream stream: a bucket's is KV_<bucket>.
	Stream   string
	Replicas int
	// Clustered says whether the server runs JetStream clustered. One that
	// does not never places more than one replica; a cluster may yet be
	// joined by the servers it lacks.
	Clustered bool
	// ClusterSize is the number of the cluster's servers with JetStream
	// that answered (1 for a server not clustered), 0 when unknown.
	ClusterSize int
	// Err is JetStream's answer.
	Err error
}

func (e *ReplicasError) Error() string {
	size := "a NATS cluster of unknown size"
	switch {
	case !e.Clustered:
		size = "a NATS server that is not clustered (cluster size 1)"
	case e.ClusterSize > 0:
		size = fmt.Sprintf("a NATS cluster of %d servers", e.ClusterSize)
	}
	return fmt.Sprintf("stream %s: %d replicas cannot be placed on %s: %v", e.Stream, e.Replicas, size, e.Err)
}

// tooFewServers says whether the cluster refused for want of servers and
// not because some are offline: it answered with its size, the replicas
// exceed it, and JetStream named no offline peer (which may come back).
func (e *ReplicasError) tooFewServers() bool {
	return e.Clustered && e.ClusterSize > 0 && e.Replicas > e.ClusterSize &&
		e.Err != nil && !strings.Contains(e.Err.Error(), peerOfflineReason)
}

// Is matches ErrReplicasUnplaceable.
func (e *ReplicasError) Is(target error) bool { return target == ErrReplicasUnplaceable }

func (e *ReplicasError) Unwrap() error { return e.Err }

// declareError is the error of declaring stream: a *ReplicasError when
// JetStream refused to place its replicas, else err wrapped with what was
// declared ("stream HARVEST_CMD", "bucket HARVEST_LEDGER").
func declareError(ctx context.Context, js jetstream.JetStream, what, stream string, replicas int, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch {
		case apiErr.ErrorCode == errCodeReplicasNotSupported:
			return &ReplicasError{Stream: stream, Replicas: replicas, ClusterSize: 1, Err: err}
		case apiErr.ErrorCode == errCodeNoPeers && replicas > 1:
			return &ReplicasError{Stream: stream, Replicas: replicas, Clustered: true, ClusterSize: clusterSize(ctx, js.Conn()), Err: err}
		case apiErr.ErrorCode == errCodeStorageExceeded || apiErr.ErrorCode == errCodeMemoryExceeded:
			fix := "give NATS more storage for JetStream"
			if key := maxBytesKeys[stream]; key != "" {
				fix = "lower " + key + " or " + fix
			}
			return fmt.Errorf("declare %s: %w (%s): %w", what, ErrInsufficientStorage, fix, err)
		}
	}
	return fmt.Errorf("declare %s: %w", what, err)
}

// clusterSize counts the servers with JetStream in the cluster nc is
// connected to, by asking every server for its statistics of nc's account
// ($SYS.REQ.ACCOUNT.PING.STATZ, which every account may ask when the
// servers have a system account). It waits for the answers at most
// statzWait, and statzQuiet after the last; 0 means no server answered.
func clusterSize(ctx context.Context, nc *nats.Conn) int {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return 0
	}
	defer func() { _ = sub.Unsubscribe() }()
	// Only this cluster's servers, should gateways join it to others.
	req, err := json.Marshal(map[string]any{"include_unused": true, "cluster": nc.ConnectedClusterName(), "exact_match": true})
	if err != nil {
		return 0
	}
	if err := nc.PublishRequest(statzSubject, inbox, req); err != nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, statzWait)
	defer cancel()
	servers := map[string]bool{}
	for {
		wait := statzWait
		if len(servers) > 0 {
			wait = statzQuiet
		}
		mctx, mcancel := context.WithTimeout(ctx, wait)
		msg, err := sub.NextMsgWithContext(mctx)
		mcancel()
		if err != nil || msg.Header.Get("Status") == noRespondersStatus {
			return len(servers)
		}
		var resp struct {
			Server struct {
				ID        string `json:"id"`
				JetStream bool   `json:"jetstream"`
			} `json:"server"`
		}
		if json.Unmarshal(msg.Data, &resp) == nil && resp.Server.JetStream {
			servers[resp.Server.ID] = true
		}
	}
}

const (
	statzSubject = "$SYS.REQ.ACCOUNT.PING.STATZ"
	statzWait    = 2 * time.Second
	statzQuiet   = 250 * time.Millisecond
	// noRespondersStatus is the server's answer to a request nobody
	// subscribes to.
	noRespondersStatus = "503"
)
