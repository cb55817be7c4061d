package natstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// clusterReadyTimeout bounds how long a cluster takes to elect its
// JetStream meta leader and hear from every running node.
const clusterReadyTimeout = 30 * time.Second

// Cluster is a NATS cluster run in-process: servers routed to each other on
// loopback, JetStream on each, each with its own store directory. A node
// can be shut down and started again on the same ports and store, as a
// restarted NATS host is.
type Cluster struct {
	t     testing.TB
	name  string
	mu    sync.Mutex
	nodes []*clusterNode
}

type clusterNode struct {
	opts *server.Options
	srv  *server.Server // nil while shut down
}

// RunCluster starts an n-node cluster, waits until its JetStream meta
// leader is elected and has heard from every node, and shuts it down at
// cleanup.
func RunCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("natstest: cluster of %d nodes", n)
	}
	c := &Cluster{t: t, name: "harvest-test"}
	ports := freePorts(t, 2*n)
	routes := make([]string, n)
	for i := range n {
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[n+i])
	}
	for i := range n {
		others := make([]string, 0, n-1)
		for j, r := range routes {
			if j != i {
				others = append(others, r)
			}
		}
		c.nodes = append(c.nodes, &clusterNode{opts: &server.Options{
			ServerName: fmt.Sprintf("n%d", i),
			Host:       "127.0.0.1",
			Port:       ports[i],
			JetStream:  true,
			StoreDir:   t.TempDir(),
			Cluster:    server.ClusterOpts{Name: c.name, Host: "127.0.0.1", Port: ports[n+i]},
			Routes:     server.RoutesFromStr(strings.Join(others, ",")),
			NoLog:      true,
			NoSigs:     true,
		}})
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.Shutdown(i)
		}
	})
	// Started together: each waits for its routes before JetStream is up.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Go(func() { errs[i] = c.start(i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	c.WaitReady()
	return c
}

// freePorts reserves n loopback ports that were free a moment ago. The
// cluster's routes must name their ports before any server starts.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	ls := make([]net.Listener, n)
	for i := range ls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("natstest: reserve a port: %v", err)
		}
		ls[i], ports[i] = l, l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

// start starts node i unless it is running.
func (c *Cluster) start(i int) error {
	c.mu.Lock()
	node := c.nodes[i]
	running := node.srv != nil
	c.mu.Unlock()
	if running {
		return nil
	}
	s, err := server.NewServer(node.opts.Clone())
	if err != nil {
		return fmt.Errorf("new server n%d: %w", i, err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		return fmt.Errorf("server n%d not ready within 10s", i)
	}
	c.mu.Lock()
	node.srv = s
	c.mu.Unlock()
	return nil
}

// Size is the number of nodes, running or not.
func (c *Cluster) Size() int { return len(c.nodes) }

// URL is every node's client URL, comma-separated: the server pool a
// client is given.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", n.opts.Port)
	}
	return strings.Join(urls, ",")
}

// Server is node i's server, nil while it is shut down.
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].srv
}

// Index is the index of the node whose server name is name (as JetStream's
// cluster info names a stream's leader and replicas), or -1.
func (c *Cluster) Index(name string) int {
	for i, n := range c.nodes {
		if n.opts.ServerName == name {
			return i
		}
	}
	return -1
}

// Shutdown stops node i and waits until it has stopped. Its store stays,
// for Restart.
func (c *Cluster) Shutdown(i int) {
	c.mu.Lock()
	s := c.nodes[i].srv
	c.nodes[i].srv = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Restart starts node i again, on its ports and store, and waits until the
// cluster is ready.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if err := c.start(i); err != nil {
		c.t.Fatalf("natstest: %v", err)
	}
	c.WaitReady()
}

// WaitReady waits until the running nodes have a JetStream meta leader
// that has heard from each of them, and each is current with it.
func (c *Cluster) WaitReady() {
	c.t.Helper()
	deadline := time.Now().Add(clusterReadyTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !c.ready() {
		if time.Now().After(deadline) {
			c.t.Fatalf("natstest: cluster not ready within %s", clusterReadyTimeout)
		}
		<-tick.C
	}
}

func (c *Cluster) ready() bool {
	c.mu.Lock()
	var running []*server.Server
	for _, n := range c.nodes {
		if n.srv != nil {
			running = append(running, n.srv)
		}
	}
	c.mu.Unlock()
	leaders := 0
	for _, s := range running {
		if !s.JetStreamIsCurrent() {
			return false
		}
		if s.JetStreamIsLeader() {
			leaders++
			if len(s.JetStreamClusterPeers()) != len(running) {
				return false
			}
		}
	}
	return leaders == 1
}

// WaitReplicas waits until JetStream's info of stream reports replicas
// replicas, each online and current with its leader, and fails t when
// that takes longer than ctx allows or clusterReadyTimeout.
func WaitReplicas(ctx context.Context, t testing.TB, js jetstream.JetStream, stream string, replicas int) {
	t.Helper()
	waitReplicas(ctx, t, "stream "+stream, replicas, func(ctx context.Context) (int, *jetstream.ClusterInfo, error) {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return 0, nil, err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return 0, nil, err
		}
		return info.Config.Replicas, info.Cluster, nil
	})
}

// WaitConsumerReplicas is WaitReplicas for a consumer of stream. A
// consumer whose configuration leaves its replicas to its stream (0) has
// its stream's.
func WaitConsumerReplicas(ctx context.Context, t testing.TB, js jetstream.JetStream, stream, consumer string, replicas int) {
	t.Helper()
	waitReplicas(ctx, t, "consumer "+stream+" > "+consumer, replicas, func(ctx context.Context) (int, *jetstream.ClusterInfo, error) {
		c, err := js.Consumer(ctx, stream, consumer)
		if err != nil {
			return 0, nil, err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return 0, nil, err
		}
		n := info.Config.Replicas
		if n == 0 && info.Cluster != nil {
			n = 1 + len(info.Cluster.Replicas)
		}
		return n, info.Cluster, nil
	})
}

func waitReplicas(ctx context.Context, t testing.TB, what string, replicas int, info func(context.Context) (int, *jetstream.ClusterInfo, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, clusterReadyTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		n, ci, err := info(ctx)
		switch {
		case err != nil:
			last = err.Error()
		case n != replicas:
			last = fmt.Sprintf("configured with %d", n)
		default:
			if last = replicasState(replicas, ci); last == "" {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("natstest: %s has not %d current replicas: %s", what, replicas, last)
		case <-tick.C:
		}
	}
}

// replicasState is "" when a stream or consumer with want replicas has
// them, each current with its leader, else what it lacks.
func replicasState(want int, ci *jetstream.ClusterInfo) string {
	if want <= 1 && (ci == nil || len(ci.Replicas) == 0) {
		return ""
	}
	if ci == nil || ci.Leader == "" {
		return "no leader"
	}
	if len(ci.Replicas) != want-1 {
		return fmt.Sprintf("leader %s and %d replicas", ci.Leader, len(ci.Replicas))
	}
	for _, r := range ci.Replicas {
		if !r.Current || r.Offline {
			return fmt.Sprintf("replica %s not current", r.Name)
		}
	}
	return ""
}
