package pgtest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy forwards connections to a test database and reads the
// PostgreSQL protocol as it passes, so that a test can lose the answer
// to a statement the server has run and committed: the fault of a
// server killed, or a network cut, right after a commit. The client
// sees its connection break and cannot tell whether the statement took
// effect.
//
// It follows the extended protocol (Parse names a statement, Bind runs
// it, Sync ends it with the server's ReadyForQuery) and the simple one
// (Query): the answer lost is everything the server sends for the Sync,
// or Query, that ends a matching statement, up to and including its
// ReadyForQuery; the proxy then closes that connection.
type Proxy struct {
	t      testing.TB
	target string
	url    string
	ln     net.Listener

	mu    sync.Mutex
	match func(sql string) bool
	lost  []string
	cut   bool
	// thaw, while the proxy is frozen, is closed by Restore.
	thaw  chan struct{}
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy starts a proxy to the database at dsn (a URL, as NewDatabase
// returns), stopped when the test ends. Its URL is dsn through the proxy,
// without TLS.
func NewProxy(t testing.TB, dsn string) *Proxy {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("pgtest: proxy: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: proxy: %v", err)
	}
	p := &Proxy{t: t, target: u.Host, ln: ln, conns: map[net.Conn]struct{}{}}
	u.Host = ln.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	p.url = u.String()
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// URL is the database's URL through the proxy.
func (p *Proxy) URL() string { return p.url }

// LoseAnswers makes the proxy lose the answer to every statement whose
// SQL match accepts, from now until LoseAnswers(nil).
func (p *Proxy) LoseAnswers(match func(sql string) bool) {
	p.mu.Lock()
	p.match = match
	p.mu.Unlock()
}

// Cut breaks every connection through the proxy and refuses new ones
// (each is closed as it comes) until Restore: the client is cut off from
// PostgreSQL, which keeps running.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// Freeze holds everything the server sends, on every connection and on
// those opened meanwhile, until Restore: the client's statements and
// connection attempts go unanswered, as with a server stopped (SIGSTOP)
// or a network that drops its packets, and nothing tells the client.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thaw == nil {
		p.thaw = make(chan struct{})
	}
}

// Restore lets connections through again after Cut, and what Freeze
// held.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	if p.thaw != nil {
		close(p.thaw)
		p.thaw = nil
	}
	p.mu.Unlock()
}

// frozen is what a connection's server side waits on before it passes
// anything on: nil when the proxy is not frozen.
func (p *Proxy) frozen() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.thaw
}

// Lost returns the statements whose answers the proxy lost, in order.
func (p *Proxy) Lost() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lost...)
}

func (p *Proxy) matches(sql string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.match != nil && p.match(sql)
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.Restore()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil || p.cut {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
		delete(p.conns, c)
	}
}

func (p *Proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		if !p.track(in, out) {
			_, _ = in.Close(), out.Close()
			continue
		}
		c := &proxyConn{p: p, client: in, server: out, stmts: map[string]string{}}
		p.wg.Go(c.fromClient)
		p.wg.Go(c.fromServer)
	}
}

// proxyConn is one proxied connection and what the proxy knows of its
// statements.
type proxyConn struct {
	p              *Proxy
	client, server net.Conn

	mu    sync.Mutex
	stmts map[string]string // prepared statements by name ("" unnamed)
	// bound is the matching statement bound since the last Sync.
	bound string
	// syncs counts the Syncs and Queries sent, readies the server's
	// ReadyForQuery answers; the answer to Sync number loseAt (0: none)
	// is lost, for the statement lose.
	syncs, readies, loseAt int
	lose                   string
}

func (c *proxyConn) stop() { c.p.untrack(c.client, c.server) }

// fromClient forwards the client's messages, noting the statements it
// prepares and runs.
func (c *proxyConn) fromClient() {
	defer c.stop()
	r := bufio.NewReader(c.client)
	// The first message has no type byte: the startup message (or a
	// cancel request, on a connection of its own).
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return
	}
	size := int(binary.BigEndian.Uint32(n[:]))
	if size < 8 {
		return
	}
	first := make([]byte, size)
	copy(first, n[:])
	if _, err := io.ReadFull(r, first[4:]); err != nil {
		return
	}
	if code := binary.BigEndian.Uint32(first[4:8]); code == 80877103 || code == 80877104 {
		// SSL or GSS encryption asked for: the proxy cannot read what
		// follows. Its URL says sslmode=disable.
		return
	}
	if _, err := c.server.Write(first); err != nil {
		return
	}
	for {
		typ, msg, err := readMessage(r)
		if err != nil {
			return
		}
		c.note(typ, msg[5:])
		if _, err := c.server.Write(msg); err != nil {
			return
		}
	}
}

// note records what a client message prepares, binds or ends.
func (c *proxyConn) note(typ byte, body []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch typ {
	case 'P': // Parse: name, query, ...
		name, rest := cstring(body)
		sql, _ := cstring(rest)
		c.stmts[name] = sql
	case 'B': // Bind: portal, statement, ...
		_, rest := cstring(body)
		name, _ := cstring(rest)
		if sql := c.stmts[name]; c.bound == "" && c.p.matches(sql) {
			c.bound = sql
		}
	case 'S': // Sync
		c.syncs++
		if c.bound != "" && c.loseAt == 0 {
			c.loseAt, c.lose = c.syncs, c.bound
		}
		c.bound = ""
	case 'Q': // Query
		c.syncs++
		if sql, _ := cstring(body); c.loseAt == 0 && c.p.matches(sql) {
			c.loseAt, c.lose = c.syncs, sql
		}
	}
}

// fromServer forwards the server's messages, but for the answer to lose.
func (c *proxyConn) fromServer() {
	defer c.stop()
	r := bufio.NewReader(c.server)
	for {
		typ, msg, err := readMessage(r)
		if err != nil {
			return
		}
		c.mu.Lock()
		drop := c.loseAt > 0 && c.readies >= c.loseAt-1
		if typ == 'Z' {
			c.readies++
		}
		done := c.loseAt > 0 && c.readies == c.loseAt
		lost := c.lose
		c.mu.Unlock()
		if done {
			// The server has answered ReadyForQuery: the statement's
			// transaction, if it was one of its own, is committed.
			c.p.mu.Lock()
			c.p.lost = append(c.p.lost, lost)
			c.p.mu.Unlock()
			return
		}
		if drop {
			continue
		}
		if thaw := c.p.frozen(); thaw != nil {
			<-thaw
		}
		if _, err := c.client.Write(msg); err != nil {
			return
		}
	}
}

// readMessage reads one typed protocol message, whole.
func readMessage(r *bufio.Reader) (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	size := int(binary.BigEndian.Uint32(head[1:]))
	if size < 4 {
		return 0, nil, errors.New("pgtest: proxy: bad message length")
	}
	msg := make([]byte, 1+size)
	copy(msg, head[:])
	if _, err := io.ReadFull(r, msg[5:]); err != nil {
		return 0, nil, fmt.Errorf("pgtest: proxy: %w", err)
	}
	return head[0], msg, nil
}

// cstring splits a NUL-terminated string off b.
func cstring(b []byte) (string, []byte) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return string(b), nil
	}
	return string(b[:i]), b[i+1:]
}
