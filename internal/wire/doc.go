// Package wire defines the messages that travel between Harvest's
// processes: the commands ingest and workers send to the scheduler, the
// tasks the scheduler sends to workers, the outcomes ingest waits for, and
// the history events they all read. It is a package of plain types that
// imports nothing of Harvest's but the public api package, whose HTTP
// answers share its execution statuses and reuse policies; every name here is
// persisted or travels on the wire, so none may change.
//
// Where things are:
//
//   - wire.go: commands, tasks, outcomes, decisions and history events,
//     with their attributes.
//   - children.go: child workflows and signals between workflows, and
//     the reports between shards.
//   - schedules.go: schedule commands and their fires' reports.
//   - reset.go: resets: their command, their targets, the links between
//     runs.
//   - batch.go: batch operations: their command, spec, filter and
//     reports.
//   - search.go: search attributes: their decision and event, types,
//     values as indexed, conditions.
//   - historypage.go, replaycheck.go: what workers ask of ingest on core
//     NATS: history pages, replay checks.
//   - retry.go: retry policies and the backoff they give.
package wire
