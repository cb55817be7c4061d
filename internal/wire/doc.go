// Package wire defines the messages that travel between Harvest's
// processes: the commands ingest and workers send to the scheduler, the
// tasks the scheduler sends to workers, the outcomes ingest waits for, and
// the history events they all read. It is a package of plain types that
// imports nothing of Harvest's but the public api package, whose HTTP
// answers share its execution statuses and reuse policies; every name here is
// persisted or travels on the wire, so none may change.
package wire
