// Package tracing carries OpenTelemetry traces across Harvest's processes:
// the W3C trace context of an incoming request travels in the headers of
// the NATS messages that follow from it (the command, the tasks its apply
// dispatches, the commands the workers publish back), so that one trace
// shows an event from receipt to completion.
//
// Off, a *Tracing is nil and every method is a no-op that allocates
// nothing: no span is made, no header is read or written. Harvest's own
// processes turn it on from the standard OTEL_EXPORTER_OTLP_* environment
// (package otlpsetup, which alone links the OTLP exporters and gRPC); a
// user's worker, through the harvest package, traces with the
// TracerProvider the user gives it. This package depends on the
// OpenTelemetry API alone (otel, otel/trace, propagation), so that the
// harvest package adds no exporter to a user's go.mod.
package tracing
