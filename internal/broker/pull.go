package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PullExpiry is how long each pull request of Harvest's consumers lasts
// at most (Pull).
const PullExpiry = 2 * time.Second

// pullGrace is how long after its expiry a pull request whose end never
// came (its expiry notice lost with a connection) is given up for a new one.
const pullGrace = time.Second

// Pull hands handle the messages of cons, in delivery order, until ctx
// ends. It keeps one pull request of up to batch messages waiting on the
// server, which delivers each message as it comes, and asks again as soon
// as the request ends: filled, expired (PullExpiry), or given up a second
// after its expiry when the server's notice never came (a reconnection).
// handle may block: the server holds back what the request has not
// delivered yet, and what it has waits in this client, its AckWait
// running (a handler that keeps messages after it returns wants
// PullWindow). Errors the server answers a request with (the consumer
// deleted, no responders) go to onErr, and the request is asked again
// after a pause.
//
// The replies come to one inbox subscription that lives as long as Pull,
// so a message the server sends is handed over however late it arrives.
// nats.go offers two ways, and each loses or delays work on a loaded
// machine:
//
//   - Fetch subscribes an inbox per request and drops what reaches it
//     after its own timer ends the request (jetstream/pull.go, fetch:
//     res.done). With FetchContext that timer runs a tenth of the expiry
//     after the server's: a message the server sends near the end of a
//     request and the client reads 0.2 s later is dropped, and the
//     consumer redelivers it only after its AckWait, 30 s. Under -race
//     with many stacks on two cores, chains of such drops outlasted the
//     end-to-end tests' deadlines.
//   - Consume asks for more only when a message or status arrives and no
//     request of its own is being published (jetstream/pull.go,
//     checkPending and fetchInProgress). When the last message of the
//     last request is handled while that request's publish is still
//     returning, nothing arrives any more and it waits for two missed
//     heartbeats: a 2 s stall in about one W1 bench run in ten.
func Pull(ctx context.Context, nc *nats.Conn, cons jetstream.Consumer, batch int, handle func(jetstream.Msg), onErr func(error)) {
	pull(ctx, nc, cons, batch, nil, nil, handle, nil, onErr)
}

// Window bounds the messages a PullWindow puller holds at once: each
// message it hands over takes a place until its handler calls Release.
// A Window of NewWindow has its places to itself; the Windows of a Pool
// each have one place of their own and borrow the rest from the pool, so
// that pullers of several consumers (a worker's consumers of one kind of
// task, one a name) share one bound and none is ever left without a place
// while the others are busy. Safe for concurrent use.
type Window struct {
	// size is the most one request asks for.
	size int
	pool *Pool
	// reserve is how many places are the window's alone (1 in a pool, 0
	// for NewWindow's), and mine how many of them are free; guarded by
	// pool.mu.
	reserve, mine int
}

// Pool holds the places the Windows it made borrow.
type Pool struct {
	mu   sync.Mutex
	free int
	// changed is closed, and replaced, whenever places are given back:
	// every puller waiting for one looks again.
	changed chan struct{}
}

// NewPool returns a Pool of shared places (at least 0).
func NewPool(shared int) *Pool {
	return &Pool{free: max(shared, 0), changed: make(chan struct{})}
}

// Window returns a Window with one place of its own that borrows up to
// the pool's places besides: its requests ask for at most size messages
// (at least 1).
func (p *Pool) Window(size int) *Window {
	return &Window{size: max(size, 1), pool: p, reserve: 1, mine: 1}
}

// NewWindow returns a Window of size places, at least 1, all its own.
func NewWindow(size int) *Window {
	size = max(size, 1)
	return &Window{size: size, pool: NewPool(size)}
}

// Release gives back the place of a message its handler is done with:
// acknowledged, handed back, or left to redelivery.
func (w *Window) Release() { w.give(1) }

// give gives back n places: the window's own first, the rest to the pool.
func (w *Window) give(n int) {
	if n <= 0 {
		return
	}
	p := w.pool
	p.mu.Lock()
	own := min(n, w.reserve-w.mine)
	w.mine += own
	p.free += n - own
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// take counts a message no request reserved a place for (a late one):
// the pool is over full until it is released.
func (w *Window) take() {
	w.pool.mu.Lock()
	w.pool.free--
	w.pool.mu.Unlock()
}

// acquire waits for a free place and reserves up to limit of them, its
// own first; 0 when ctx ends first.
func (w *Window) acquire(ctx context.Context, limit int) int {
	p := w.pool
	for {
		p.mu.Lock()
		n := min(w.mine, limit)
		w.mine -= n
		borrow := max(min(p.free, limit-n), 0)
		p.free -= borrow
		n += borrow
		if n > 0 {
			p.mu.Unlock()
			return n
		}
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0
		case <-changed:
		}
	}
}

// PullWindow is Pull for handlers that keep a message after handle
// returns, as a worker keeps a task it runs: it asks only for as many
// messages as win has free places, so every message the server sends this
// process is with a handler, none waits in the client's buffer where
// nothing keeps it in progress. handle must not block; each message takes
// a place of win until the handler calls win.Release. A message that
// reaches the client after the request it answered was given up is
// handed over too, over the window's size.
//
// A request reserves its places while it waits; so that the pullers of a
// Pool leave places to each other, each asks for what its consumer
// delivers: one message at first and after a request that expired empty,
// as many as the last one delivered after one that expired part filled,
// twice as many (up to the window's size) after one that was filled.
//
// When ctx ends PullWindow stops asking and, before it returns, hands
// handBack the messages the server had already sent for the open request
// (it unsubscribes, waits for the server to have seen it, and reads what
// came before), so that they can be handed back for immediate redelivery
// rather than wait out the consumer's AckWait.
func PullWindow(ctx context.Context, nc *nats.Conn, cons jetstream.Consumer, win *Window, handle, handBack func(jetstream.Msg), onErr func(error)) {
	pull(ctx, nc, cons, win.size, win, nil, handle, handBack, onErr)
}

// PullOrdered is PullWindow for a consumer that is one lane of an Order:
// it asks for messages only while no lane of a higher level may have a
// backlog (OrderLane).
func PullOrdered(ctx context.Context, nc *nats.Conn, cons jetstream.Consumer, win *Window, lane *OrderLane, handle, handBack func(jetstream.Msg), onErr func(error)) {
	pull(ctx, nc, cons, win.size, win, lane, handle, handBack, onErr)
}

// drainTimeout bounds how long PullWindow reads what was on its way when
// its context ended.
const drainTimeout = 5 * time.Second

// pull is Pull, asking for at most batch messages per request; with win,
// at most as many as win has free places; with ord, only while ord lets
// it; with handBack, draining the inbox into it when ctx ends.
func pull(ctx context.Context, nc *nats.Conn, cons jetstream.Consumer, batch int, win *Window, ord *OrderLane, handle, handBack func(jetstream.Msg), onErr func(error)) {
	info := cons.CachedInfo()
	subject := fmt.Sprintf("$JS.API.CONSUMER.MSG.NEXT.%s.%s", info.Stream, info.Name)
	request := func(n int, noWait bool) ([]byte, error) {
		if noWait {
			// Answered at once: what the consumer has, up to n, then the
			// end of the stream (404), or 404 or 408 alone when it has
			// nothing for this request.
			return json.Marshal(struct {
				Batch  int  `json:"batch"`
				NoWait bool `json:"no_wait"`
			}{n, true})
		}
		return json.Marshal(struct {
			Batch   int           `json:"batch"`
			Expires time.Duration `json:"expires"`
		}{n, PullExpiry})
	}
	req, err := request(batch, false)
	if err != nil {
		onErr(fmt.Errorf("pull %s: %w", subject, err))
		return
	}
	pause := 50 * time.Millisecond
	wait := func() {
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		pause = min(pause*2, time.Second)
	}
	inbox := nc.NewInbox()
	var sub *replies
	for sub == nil {
		if sub, err = subscribeReplies(nc, inbox); err != nil {
			onErr(fmt.Errorf("pull %s: subscribe: %w", subject, err))
			if wait(); ctx.Err() != nil {
				return
			}
		}
	}
	defer sub.unsubscribe()

	left := 0 // messages the open request may still deliver; 0: none open
	// With a window, want is the size of the next request, and got counts
	// what the open one delivered.
	want, got := 1, 0
	// end ends the open request: its places not filled are free again.
	// One that ended short says the consumer has no backlog for it.
	end := func() {
		if win != nil {
			win.give(left)
			if left > 0 {
				want = max(1, got)
			}
		}
		if left > 0 {
			ord.set(false)
		}
		left = 0
	}
	// Its backlog unknown, the lane holds back the lower ones until its
	// first request answers; leaving, it holds back none.
	ord.set(true)
	defer ord.set(false)
	var until time.Time
	for ctx.Err() == nil {
		if left == 0 {
			if !ord.wait(ctx) {
				break // ctx ended
			}
			n := batch
			if win != nil {
				if n = win.acquire(ctx, want); n == 0 {
					break // ctx ended
				}
				if ord.heldBack() {
					// A higher lane found a backlog while this one waited
					// for places: they are its.
					win.give(n)
					continue
				}
				got = 0
				if req, err = request(n, ord.probes()); err != nil {
					win.give(n)
					onErr(fmt.Errorf("pull %s: %w", subject, err))
					return
				}
			}
			if err := nc.PublishRequest(subject, inbox, req); err != nil {
				if win != nil {
					win.give(n)
				}
				onErr(fmt.Errorf("pull %s: %w", subject, err))
				wait()
				continue
			}
			left, until = n, time.Now().Add(PullExpiry+pullGrace)
		}
		wctx, cancel := context.WithDeadline(ctx, until)
		m, err := sub.next(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			if m != nil && err == nil && handBack != nil {
				if _, ok := pullStatus(m); !ok {
					handBack(pulledMsg{m})
				}
			}
			end()
			sub.drain(handBack)
			return
		case errors.Is(err, context.DeadlineExceeded):
			end() // its end never came: ask again
			continue
		case err != nil:
			onErr(fmt.Errorf("pull %s: %w", subject, err))
			end()
			wait()
			continue
		}
		if err, ok := pullStatus(m); ok {
			// The request ended (or a heartbeat, which none asks for). A
			// late notice of a request given up ends the open one early:
			// one more request is asked, no message is lost.
			end()
			if err != nil {
				onErr(fmt.Errorf("pull %s: %w", subject, err))
				wait()
			}
			continue
		}
		pause = 50 * time.Millisecond
		switch {
		case left > 0:
			left--
			got++
			if left == 0 {
				ord.set(true) // filled: there may be more
				if win != nil {
					want = min(2*want, batch) // ask for more
				}
			}
		case win != nil:
			win.take() // late: its request was given up
		}
		handle(pulledMsg{m})
	}
	end()
	sub.drain(handBack)
}

// replies is the inbox a puller's requests are answered on: an
// asynchronous subscription that queues what comes, without bound (the
// requests bound it: at most their batches, and the late messages of a
// request given up). nats.go's SubscribeSync would do, but it allocates
// a channel of 65,536 messages (512 KiB) for each subscription, and a
// worker has one per consumer, five a name.
type replies struct {
	sub *nats.Subscription
	mu  sync.Mutex
	q   []*nats.Msg
	// more has a token while q may have gained a message since next
	// last looked.
	more chan struct{}
}

func subscribeReplies(nc *nats.Conn, subject string) (*replies, error) {
	r := &replies{more: make(chan struct{}, 1)}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		r.mu.Lock()
		r.q = append(r.q, m)
		r.mu.Unlock()
		select {
		case r.more <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	// The requests bound what is queued.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	r.sub = sub
	return r, nil
}

// next returns the next reply, waiting for one until ctx ends.
func (r *replies) next(ctx context.Context) (*nats.Msg, error) {
	for {
		if m := r.take(); m != nil {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-r.more:
		}
	}
}

// take returns the reply at the head of the queue, nil when it is empty.
func (r *replies) take() *nats.Msg {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.q) == 0 {
		return nil
	}
	m := r.q[0]
	r.q[0] = nil
	r.q = r.q[1:]
	return m
}

func (r *replies) unsubscribe() { _ = r.sub.Unsubscribe() }

// drain unsubscribes and hands handBack what reached the inbox before
// the server saw the unsubscription; without handBack it does nothing
// (the deferred unsubscribe drops what is queued).
func (r *replies) drain(handBack func(jetstream.Msg)) {
	if handBack == nil {
		return
	}
	closed := r.sub.StatusChanged(nats.SubscriptionClosed)
	if r.sub.Drain() == nil {
		// Once the server has seen the unsubscription and every message
		// before it is queued, the subscription closes.
		t := time.NewTimer(drainTimeout)
		select {
		case <-closed:
		case <-t.C:
		}
		t.Stop()
	}
	for m := r.take(); m != nil; m = r.take() {
		if _, ok := pullStatus(m); !ok {
			handBack(pulledMsg{m})
		}
	}
}

// pullStatus says whether m is a status of the server rather than a
// message of the stream, and the error it reports; an expiry or an empty
// stream is no error.
func pullStatus(m *nats.Msg) (error, bool) {
	status := m.Header.Get("Status")
	if len(m.Data) > 0 || status == "" {
		return nil, false
	}
	descr := m.Header.Get("Description")
	lower := strings.ToLower(descr)
	switch {
	case status == "408", status == "404", status == "100":
		return nil, true
	case status == "503":
		return nats.ErrNoResponders, true
	case status == "409" && strings.Contains(lower, "consumer deleted"):
		return jetstream.ErrConsumerDeleted, true
	case status == "409" && strings.Contains(lower, "server shutdown"):
		return jetstream.ErrServerShutdown, true
	}
	return fmt.Errorf("server answered %s %s", status, descr), true
}

// pulledMsg is a message of a pull request, with the methods of a
// jetstream.Msg; acknowledgements go to its reply subject, as nats.go's
// own do.
type pulledMsg struct{ m *nats.Msg }

func (p pulledMsg) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := p.m.Metadata()
	if err != nil {
		return nil, fmt.Errorf("message metadata: %w", err)
	}
	return &jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Consumer: md.Sequence.Consumer, Stream: md.Sequence.Stream},
		NumDelivered: md.NumDelivered,
		NumPending:   md.NumPending,
		Timestamp:    md.Timestamp,
		Stream:       md.Stream,
		Consumer:     md.Consumer,
		Domain:       md.Domain,
	}, nil
}

func (p pulledMsg) Data() []byte         { return p.m.Data }
func (p pulledMsg) Headers() nats.Header { return p.m.Header }
func (p pulledMsg) Subject() string      { return p.m.Subject }
func (p pulledMsg) Reply() string        { return p.m.Reply }
func (p pulledMsg) Ack() error           { return ackErr(p.m.Ack()) }
func (p pulledMsg) Nak() error           { return ackErr(p.m.Nak()) }
func (p pulledMsg) InProgress() error    { return ackErr(p.m.InProgress()) }
func (p pulledMsg) Term() error          { return ackErr(p.m.Term()) }
func (p pulledMsg) DoubleAck(ctx context.Context) error {
	return ackErr(p.m.AckSync(nats.Context(ctx)))
}

func (p pulledMsg) NakWithDelay(delay time.Duration) error {
	return ackErr(p.m.NakWithDelay(delay))
}

// ackErr answers as a jetstream.Msg does: a message acknowledged before
// is jetstream.ErrMsgAlreadyAckd, not nats.go's older error of that name.
func ackErr(err error) error {
	if errors.Is(err, nats.ErrMsgAlreadyAckd) {
		return jetstream.ErrMsgAlreadyAckd
	}
	return err
}

// TermWithReason stops redelivery, with reason in the advisory.
func (p pulledMsg) TermWithReason(reason string) error {
	if p.m.Reply == "" {
		return nats.ErrMsgNoReply
	}
	if err := p.m.Respond([]byte("+TERM " + reason)); err != nil {
		return fmt.Errorf("term message: %w", err)
	}
	return nil
}
