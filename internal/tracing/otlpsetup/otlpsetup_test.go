package otlpsetup_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/tracing/otlpsetup"
)

func TestOffWithoutAnEndpoint(t *testing.T) {
	for _, env := range []map[string]string{
		{},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"},
	} {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
		for k, v := range env {
			t.Setenv(k, v)
		}
		tr, err := otlpsetup.FromEnv(context.Background(), "harvest-test")
		require.NoError(t, err)
		require.Nil(t, tr, "%v", env)
		require.False(t, tr.Enabled())

		// Off, nothing is made or carried.
		ctx, span := tr.Start(context.Background(), "x")
		require.False(t, span.IsRecording())
		h := nats.Header{}
		tr.Inject(ctx, h)
		require.Empty(t, h)
		require.Empty(t, tr.Traceparent(ctx))
		require.NoError(t, tr.Shutdown(context.Background()))
	}
}

func TestOnWithAnEndpoint(t *testing.T) {
	for _, protocol := range []string{"", "http/protobuf", "grpc"} {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
		tr, err := otlpsetup.FromEnv(context.Background(), "harvest-test")
		require.NoError(t, err)
		require.True(t, tr.Enabled(), protocol)
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // nothing listens: do not wait for the export
		_ = tr.Shutdown(ctx)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	_, err := otlpsetup.FromEnv(context.Background(), "harvest-test")
	require.True(t, errors.Is(err, otlpsetup.ErrProtocol), "%v", err)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	_, err = otlpsetup.FromEnv(context.Background(), "harvest-test")
	require.ErrorContains(t, err, "OTEL_TRACES_EXPORTER")
}
