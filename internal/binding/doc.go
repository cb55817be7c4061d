// Package binding owns NATS subject bindings: routes from a JetStream stream
// that the user's own services publish to (orders.created, say) to
// workflow starts and signal-with-starts, with the same routing rules as
// webhooks.
//
// A Runner consumes each binding's stream through a durable pull consumer,
// parses each message as JSON, routes it by event type, publishes the
// command to Harvest's command stream and acknowledges the message only
// after JetStream holds the command. A message that can never become a
// command goes to the binding's dead-letter subject and is terminated, so
// it never blocks the binding.
//
// Binding values are plain configuration; a Runner is safe for concurrent
// use.
//
// It publishes commands through internal/broker and must not touch
// PostgreSQL: bindings run in ingest, which only reads.
package binding
