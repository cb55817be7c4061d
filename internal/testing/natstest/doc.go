// Package natstest runs embedded NATS servers with JetStream for tests: each
// on a random loopback port with its own store directory, so tests never
// share streams. Production code never imports it.
package natstest
