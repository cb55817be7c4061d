// Package tracing carries OpenTelemetry traces across Harvest's processes:
// the W3C trace context of an incoming request travels in the headers of
// the NATS messages that follow from it (the command, the tasks its apply
// dispatches, the commands the workers publish back), so that one trace
// shows an event from receipt to completion.
//
// Tracing is off unless the standard OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set. Off, a *Tracing is nil and
// every method is a no-op that allocates nothing: no span is made, no
// header is read or written.
package tracing
