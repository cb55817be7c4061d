// Package broker owns Harvest's JetStream topology: the command stream,
// the task stream and the key-value buckets (accepted commands, admission
// gates, input schemas, the effect ledger, cancellations, hand-backs),
// their subjects, the mapping of commands to logical shards, publishing
// with message ids, the pull loops that consume them, and the task
// stream's backlog of a task queue by name (TaskBacklog).
//
// Topology values are safe for concurrent use once declared.
//
// It holds no state of its own beyond the declared handles, and must not
// touch PostgreSQL or HTTP: what a command does is the scheduler's, what
// it carries is internal/wire's.
package broker
