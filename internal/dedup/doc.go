// Package dedup owns Harvest's idempotency keys: validation of the keys
// callers send, derivation of command ids (which become Nats-Msg-Id
// headers), and activity idempotency keys and their subkeys. Which shard a
// command goes to is internal/placement's.
//
// Everything here is a pure function of its input, safe for concurrent use.
//
// It is pure computation: no I/O, no clock, no state, so a key derived
// anywhere (ingest, scheduler, worker, a user's own code) is the same key.
// Users see its activity keys as harvest.ActivityKey; it must not grow
// anything that talks to NATS or PostgreSQL.
package dedup
