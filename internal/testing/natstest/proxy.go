package natstest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a NATS server, and can lose what the
// server sends on them, as a connection that breaks while the server is
// writing does: what the server wrote is gone, and the server does not
// know. Clients connect to URL and reconnect through it.
type Proxy struct {
	l      net.Listener
	target string

	mu        sync.Mutex
	blackhole bool
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup
}

// NewProxy starts a proxy to addr (host:port), closed at cleanup.
func NewProxy(t testing.TB, addr string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: proxy listen: %v", err)
	}
	p := &Proxy{l: l, target: addr, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = l.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// URL is the nats:// URL clients connect to.
func (p *Proxy) URL() string { return "nats://" + p.l.Addr().String() }

// Blackhole, while on, discards every byte the server sends to the
// proxied clients; what they send still reaches the server.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.mu.Unlock()
}

// Cut closes every proxied connection; clients reconnect through the
// proxy.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) dropping() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blackhole
}

func (p *Proxy) accept() {
	for {
		client, err := p.l.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.track(client, server)
		closeBoth := func() { _ = client.Close(); _ = server.Close() }
		p.wg.Go(func() {
			_, _ = io.Copy(server, client)
			closeBoth()
		})
		p.wg.Go(func() {
			defer closeBoth()
			buf := make([]byte, 32<<10)
			for {
				n, err := server.Read(buf)
				if n > 0 && !p.dropping() {
					if _, werr := client.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
}
