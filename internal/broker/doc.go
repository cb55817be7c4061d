// Package broker owns Harvest's JetStream topology: the command stream,
// the task stream and the key-value buckets (accepted commands, admission
// gates, input schemas, the effect ledger, cancellations, hand-backs),
// their subjects (a command's subject names its shard, which
// internal/placement picks), publishing with message ids, the pull loops
// that consume them, and the task stream's backlog of a task queue by
// name (TaskBacklog).
//
// Topology values are safe for concurrent use once declared.
//
// It holds no state of its own beyond the declared handles, and must not
// touch PostgreSQL or HTTP: what a command does is the scheduler's, what
// it carries is internal/wire's.
package broker

// Where things are:
//
//   - streams.go: the streams and buckets (add a bucket there), Topology,
//     Declare and Bind. config.go: Config, its defaults and Validate.
//     declare_retry.go: declaring again while a cluster cannot answer.
//     replicas.go: the errors of a cluster that cannot place the replicas
//     or has no room, and its size. keep.go: the keepers that hold the
//     work-queue streams' last blocks on file storage.
//   - subjects.go: every subject: commands by shard, tasks by task queue,
//     name and priority, outcome and query state announcements, prunes.
//   - publish.go: publishing a command with its message id, retried after
//     a lost acknowledgement; a full stream, a message too large.
//     accepted.go: the commands answered 202 before their outcome.
//   - pull.go: the pull loops (Pull, PullWindow, PullOrdered), their
//     inboxes, and the places a worker's Window borrows from a Pool.
//     order.go: pulling consumers in the order of their priorities.
//     follow.go: watching a bucket.
//   - backlog.go: a task queue's backlog. client.go: the options of every
//     connection to NATS.
