package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options tune RunServer.
type Options struct {
	// Port is the client port; 0 picks a random one. Tests that restart the
	// server set a fixed port so clients can reconnect over TCP.
	Port int
	// StoreDir is the JetStream store; empty means a fresh t.TempDir().
	StoreDir string
	// Configure, when set, changes the server's options last, before it
	// starts: authentication (Operator.Configure, user/password, token,
	// nkeys) or TLS.
	Configure func(*server.Options)
}

// RunServer starts an embedded NATS server with JetStream and shuts it down
// at cleanup.
func RunServer(t testing.TB, opts Options) *server.Server {
	t.Helper()
	if opts.StoreDir == "" {
		opts.StoreDir = t.TempDir()
	}
	port := opts.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	sopts := &server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		JetStream: true,
		StoreDir:  opts.StoreDir,
		NoLog:     true,
		NoSigs:    true,
	}
	if opts.Configure != nil {
		opts.Configure(sopts)
	}
	s, err := server.NewServer(sopts)
	if err != nil {
		t.Fatalf("natstest: new server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("natstest: server not ready within 10s")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Connect opens a client connection to s, closed at cleanup.
func Connect(t testing.TB, s *server.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return ConnectURL(t, s.ClientURL())
}

// ConnectURL opens a client connection to url, a server or a pool of them
// (Cluster.URL), reconnecting forever; it is closed at cleanup.
func ConnectURL(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}

// Context returns a context cancelled at cleanup, with a generous deadline
// so a hung test fails instead of stalling the suite.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
