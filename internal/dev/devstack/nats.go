package devstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/harvest-engine/harvest/internal/broker"
)

// natsHost is where the embedded NATS server listens.
const natsHost = "127.0.0.1"

func (s *Stack) startNATS(ctx context.Context) error {
	if s.cfg.NATSURL == "" {
		port := s.cfg.NATSPort
		if port == 0 {
			port = server.RANDOM_PORT
		}
		ns, err := server.NewServer(&server.Options{
			ServerName: "harvest-dev",
			Host:       natsHost,
			Port:       port,
			// Every client, the stack's own too, gives the state dir's
			// user and password: the port is open to every local user.
			Username:  natsUser,
			Password:  s.creds.NATSPassword,
			JetStream: true,
			StoreDir:  filepath.Join(s.cfg.StateDir, "nats"),
			NoSigs:    true,
			NoLog:     true,
		})
		if err != nil {
			return fmt.Errorf("embedded nats: %w", err)
		}
		go ns.Start()
		if !ns.ReadyForConnections(30 * time.Second) {
			ns.Shutdown()
			return errors.New("embedded nats: not ready within 30s")
		}
		s.nats = ns
		s.cfg.NATSURL = natsClientURL(ns.Addr().(*net.TCPAddr).Port, s.creds)
	}
	nc, err := nats.Connect(s.cfg.NATSURL, append(broker.ClientOptions("harvest-dev", s.log), s.cfg.NATSOptions...)...)
	if err != nil {
		return fmt.Errorf("connect to nats %s: %w", redactURLs(s.cfg.NATSURL), err)
	}
	s.nc = nc
	return nil
}
