package binding

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sourcegraph/conc"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/startpolicy"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Defaults for Config's zero values.
const (
	DefaultAckWait        = 30 * time.Second
	DefaultPublishTimeout = 5 * time.Second
	DefaultRetryDelay     = time.Second
	DefaultMaxRetryDelay  = time.Minute
)

// Headers a dead letter carries besides the original message's own (all
// but the Nats-* ones).
const (
	// HeaderDeadReason is why the message was dead-lettered: one of the
	// Reason* codes.
	HeaderDeadReason = "Harvest-Dead-Reason"
	// HeaderDeadError is the error, for a person.
	HeaderDeadError = "Harvest-Dead-Error"
	// HeaderBinding, HeaderStream and HeaderStreamSeq are the message's
	// coordinates; HeaderSubject is the subject it was published to.
	HeaderBinding   = "Harvest-Binding"
	HeaderStream    = "Harvest-Stream"
	HeaderStreamSeq = "Harvest-Stream-Seq"
	HeaderSubject   = "Harvest-Subject"
	// HeaderDeliveries is how many times the binding received the message.
	HeaderDeliveries = "Harvest-Deliveries"
	// HeaderMsgID is the message's Nats-Msg-Id, if it had one.
	HeaderMsgID = "Harvest-Msg-Id"
	// HeaderBodyOmitted is set, to the body's size in bytes, on a dead
	// letter that goes without the message's body: the body and the dead
	// letter's headers together exceed the server's max payload. The
	// body stays at its coordinates in the bound stream, as long as the
	// stream keeps it.
	HeaderBodyOmitted = "Harvest-Dead-Body-Omitted"
)

// Dead-letter reasons, the values of HeaderDeadReason.
const (
	// ReasonInvalidJSON: the body is not one JSON value.
	ReasonInvalidJSON = "invalid_json"
	// ReasonMissingEventType: event_pointer selects no non-empty string.
	ReasonMissingEventType = "missing_event_type"
	// ReasonInvalidMsgID: the Nats-Msg-Id makes a key longer than
	// dedup.MaxKeyBytes, or holds U+0000, a control character or bytes
	// that are not UTF-8.
	ReasonInvalidMsgID = "invalid_msg_id"
	// ReasonUnroutable: the rule's input_pointer or a workflow_id
	// placeholder selects nothing usable (a workflow_id that is blank,
	// over 256 bytes or holds a control character included).
	ReasonUnroutable = "unroutable_event"
	// ReasonUnavailable: the command could not be published in
	// max_deliver deliveries.
	ReasonUnavailable = "unavailable"
	// ReasonUnstorable: the body of a message a rule routes holds what
	// PostgreSQL cannot store (U+0000, an unpaired surrogate, bytes that
	// are not UTF-8, a number beyond numeric's range, nesting deeper than
	// 512); see storable.CheckJSON. The error names the JSON Pointer.
	ReasonUnstorable = "payload_unstorable"
)

// maxSessionBackoff caps the wait between attempts to find a binding's
// stream or to create its consumer; while the stream is missing, a warning
// is logged every streamWaitWarnEvery.
const (
	maxSessionBackoff   = 10 * time.Second
	streamWaitWarnEvery = 5 * time.Minute
)

// Config configures a Runner. Zero values mean the documented defaults.
type Config struct {
	// Topology is where commands are published; the bound streams are on
	// the same JetStream.
	Topology *broker.Topology
	// Bindings to run.
	Bindings []Binding
	// StartPolicies are the workflows' start policies: a rule's start of
	// such a workflow goes under its policy.
	StartPolicies map[string]*startpolicy.Policy
	// TaskQueues are the workflows' configured task queues
	// (workflows.<name>.task_queue): a rule's start of such a workflow
	// goes to its queue, of any other to "default".
	TaskQueues map[string]string
	// AckWait is the consumers' ack wait: how long a message delivered to
	// a runner that vanished waits before it is delivered again; default
	// 30s. It must exceed twice PublishTimeout.
	AckWait time.Duration
	// PublishTimeout bounds the publication of one command, and of one
	// dead letter; default 5s.
	PublishTimeout time.Duration
	// RetryDelay is how long a message whose command could not be
	// published waits before its next delivery, doubled on each delivery
	// up to MaxRetryDelay; defaults 1s and 1 minute.
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration
	// Metrics is the registry the runner's counter goes to; default a
	// fresh one.
	Metrics prometheus.Registerer
	Logger  *slog.Logger
}

func (c Config) withDefaults() Config {
	c.AckWait = cmp.Or(c.AckWait, DefaultAckWait)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, DefaultPublishTimeout)
	c.RetryDelay = cmp.Or(c.RetryDelay, DefaultRetryDelay)
	c.MaxRetryDelay = cmp.Or(c.MaxRetryDelay, max(DefaultMaxRetryDelay, c.RetryDelay))
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.Topology == nil {
		return errors.New("binding config: Topology is required")
	}
	if err := ValidateAll(c.Bindings); err != nil {
		return err
	}
	switch d := c.withDefaults(); {
	case c.AckWait < 0 || c.PublishTimeout < 0 || c.RetryDelay < 0 || c.MaxRetryDelay < 0:
		return errors.New("binding config: AckWait, PublishTimeout, RetryDelay and MaxRetryDelay must not be negative")
	case d.AckWait < time.Second:
		return fmt.Errorf("binding config: AckWait %s: want at least 1s", d.AckWait)
	case d.AckWait <= 2*d.PublishTimeout:
		return fmt.Errorf("binding config: AckWait %s: want more than twice PublishTimeout (%s)", d.AckWait, d.PublishTimeout)
	case d.MaxRetryDelay < d.RetryDelay:
		return fmt.Errorf("binding config: MaxRetryDelay %s: want at least RetryDelay (%s)", d.MaxRetryDelay, d.RetryDelay)
	}
	return nil
}

// Runner consumes the bound streams and turns their messages into
// commands: one goroutine per binding, one message at a time in stream
// order. Several runners (ingest replicas) with the same bindings share
// each binding's durable consumer, and so its messages.
type Runner struct {
	cfg      Config
	log      *slog.Logger
	bindings []Binding
	messages *prometheus.CounterVec

	mu     sync.Mutex
	cancel context.CancelFunc
	wg     *conc.WaitGroup
}

// Results counted in harvest_binding_messages_total.
const (
	resultPublished    = "published"
	resultDuplicate    = "duplicate"
	resultIgnored      = "ignored"
	resultRetried      = "retried"
	resultDeadLettered = "dead_lettered"
)

// New checks cfg and returns a Runner; Start runs it.
func New(cfg Config) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Metrics == nil {
		cfg.Metrics = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Runner{cfg: cfg, log: cfg.Logger}
	for _, b := range cfg.Bindings {
		r.bindings = append(r.bindings, b.WithDefaults())
	}
	r.messages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "harvest_binding_messages_total",
		Help: "Messages taken from bound streams, by binding and result: published, duplicate (the broker had the command), ignored (no rule), retried, dead_lettered.",
	}, []string{"binding", "result"})
	if err := cfg.Metrics.Register(r.messages); err != nil {
		return nil, fmt.Errorf("binding metrics: %w", err)
	}
	for _, b := range r.bindings {
		for _, res := range []string{resultPublished, resultDuplicate, resultIgnored, resultRetried, resultDeadLettered} {
			r.messages.WithLabelValues(b.Name, res)
		}
	}
	return r, nil
}

// Bindings are the bindings the runner runs, defaults applied.
func (r *Runner) Bindings() []Binding { return slices.Clone(r.bindings) }

// Counts are the messages of one binding by what became of them.
type Counts struct {
	Published, Duplicate, Ignored, Retried, DeadLettered int64
}

// Counts are the messages of binding name this runner has taken since
// it was made (harvest_binding_messages_total): this process's share of
// the binding's messages, which every runner of it shares.
func (r *Runner) Counts(name string) Counts {
	n := func(result string) int64 {
		var m dto.Metric
		if err := r.messages.WithLabelValues(name, result).Write(&m); err != nil {
			return 0
		}
		return int64(m.GetCounter().GetValue())
	}
	return Counts{Published: n(resultPublished), Duplicate: n(resultDuplicate), Ignored: n(resultIgnored),
		Retried: n(resultRetried), DeadLettered: n(resultDeadLettered)}
}

// Start starts consuming each binding in the background and returns. A
// binding whose stream does not exist yet waits for it, looking again with
// a backoff of up to 10s and logging a warning when it starts waiting and
// every 5 minutes while it waits, so the services that own the stream may
// start after Harvest.
func (r *Runner) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		return errors.New("binding runner already started")
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel, r.wg = cancel, &conc.WaitGroup{}
	for _, b := range r.bindings {
		r.wg.Go(func() { r.run(runCtx, b) })
	}
	return nil
}

// Stop stops consuming: each binding finishes its pull request in flight
// (up to a second) and the message in hand (within PublishTimeout). Safe
// to call twice.
func (r *Runner) Stop(ctx context.Context) error {
	r.mu.Lock()
	cancel, wg := r.cancel, r.wg
	r.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		wg.Wait()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop bindings: %w", ctx.Err())
	}
}

// run runs sessions of one binding until ctx ends.
func (r *Runner) run(ctx context.Context, b Binding) {
	log := r.log.With("binding", b.Name, "stream", b.Stream)
	const first = 100 * time.Millisecond
	backoff, waiting, warned := first, false, time.Time{}
	for {
		err := r.session(ctx, b, log, func() { backoff, waiting = first, false })
		if ctx.Err() != nil {
			return
		}
		switch {
		case !errors.Is(err, jetstream.ErrStreamNotFound):
			log.Warn("binding consumer stopped; restarting it", "err", err, "retry_in", backoff)
		case !waiting || time.Since(warned) >= streamWaitWarnEvery:
			log.Warn("binding waits for its stream, which does not exist", "retry_in", backoff)
			waiting, warned = true, time.Now()
		default:
			log.Debug("binding waits for its stream, which does not exist", "retry_in", backoff)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, maxSessionBackoff)
	}
}

// session creates or updates the binding's durable consumer and handles
// its messages until ctx ends (nil) or the consumer fails.
func (r *Runner) session(ctx context.Context, b Binding, log *slog.Logger, ready func()) error {
	stream, err := r.cfg.Topology.JS.Stream(ctx, b.Stream)
	if err != nil {
		return fmt.Errorf("look up stream %s: %w", b.Stream, err)
	}
	deliver := jetstream.DeliverAllPolicy
	if b.Deliver == DeliverNew {
		deliver = jetstream.DeliverNewPolicy
	}
	name := b.ConsumerName()
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "Harvest binding " + b.Name + ": messages to workflow commands",
		FilterSubject: b.Subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: deliver,
		AckWait:       r.cfg.AckWait,
		// The runner bounds the deliveries itself (max_deliver), so that
		// the last one can still dead-letter the message: at the
		// consumer's MaxDeliver the server would only stop delivering.
		MaxDeliver: -1,
	})
	if err != nil {
		return fmt.Errorf("create consumer %s on stream %s: %w", name, b.Stream, err)
	}
	ready()
	log.Info("binding consuming", "subject", b.Subject, "consumer", name)
	// One message per request: nothing waits in a client buffer while its
	// ack wait runs, so a delivery is always a try. Pull hands over a
	// message however late it reaches the client.
	pctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	broker.Pull(pctx, r.cfg.Topology.JS.Conn(), cons, 1, func(m jetstream.Msg) {
		r.handle(ctx, b, log, m)
	}, func(err error) {
		// The consumer or the stream is gone (no responders, or deleted),
		// or the connection is: make them again.
		stop(fmt.Errorf("pull from consumer %s: %w", name, err))
	})
	if ctx.Err() != nil {
		return nil
	}
	return context.Cause(pctx)
}

// delivery is one message in hand.
type delivery struct {
	b    Binding
	m    jetstream.Msg
	meta *jetstream.MsgMetadata
	log  *slog.Logger
}

// handle turns one message into a command, and acknowledges it once
// JetStream holds the command. The message's own context is detached from
// ctx: a stopping runner finishes the message in hand.
func (r *Runner) handle(ctx context.Context, b Binding, log *slog.Logger, m jetstream.Msg) {
	ctx = context.WithoutCancel(ctx)
	meta, err := m.Metadata()
	if err != nil {
		log.Error("binding message without JetStream metadata", "err", err)
		return
	}
	d := delivery{b: b, m: m, meta: meta, log: log.With("stream_seq", meta.Sequence.Stream)}
	key, err := MessageKey(b.Name, b.Stream, meta.Sequence.Stream, m.Headers())
	if err != nil {
		r.deadLetter(ctx, d, ReasonInvalidMsgID, err)
		return
	}
	event, eventType, err := b.Event(m.Data())
	if err != nil {
		reason := ReasonInvalidJSON
		if errors.Is(err, ErrMissingEventType) {
			reason = ReasonMissingEventType
		}
		r.deadLetter(ctx, d, reason, err)
		return
	}
	rule, ok := b.Rule(eventType)
	if !ok {
		d.log.Info("binding event ignored: no rule", "event", eventType)
		r.messages.WithLabelValues(b.Name, resultIgnored).Inc()
		if err := m.Ack(); err != nil {
			d.log.Warn("ack binding message", "err", err)
		}
		return
	}
	if err := storable.CheckJSON(m.Data()); err != nil {
		r.deadLetter(ctx, d, ReasonUnstorable, fmt.Errorf("the message body %w", err))
		return
	}
	cmd, shard, err := rule.Command(r.cfg.Topology.Layout(), r.cfg.TaskQueues[rule.Workflow], key, event, time.Now())
	if err != nil {
		r.deadLetter(ctx, d, ReasonUnroutable, err)
		return
	}
	if pol := r.cfg.StartPolicies[rule.Workflow]; pol != nil && cmd.Kind == wire.KindStart {
		// Under a start policy: deduped by its command id, derived from
		// the message's, never by a start key.
		if shard, err = pol.Place(cmd, r.cfg.Topology.Layout()); err != nil {
			r.deadLetter(ctx, d, ReasonUnroutable, fmt.Errorf("%s starts under a %s start policy: %w", rule.Workflow, pol.Kind(), err))
			return
		}
	}
	// From here on the message's lines name its command, and the
	// workflow it starts; the execution is the scheduler's to make.
	d.log = logattr.Command(d.log, cmd)
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	ack, err := r.cfg.Topology.PublishCommand(pctx, shard, cmd)
	cancel()
	if err != nil {
		r.retry(ctx, d, err)
		return
	}
	result := resultPublished
	if ack.Duplicate {
		result = resultDuplicate
		// Counted by the scheduler against the key (the claim layer
		// counts the rest): bindings never write PostgreSQL.
		pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
		if err := r.cfg.Topology.ReportDuplicate(pctx, shard, wire.DuplicateOf(cmd, wire.DuplicateBroker)); err != nil {
			d.log.Warn("report a duplicate to the scheduler", "err", err)
		}
		cancel()
	}
	r.messages.WithLabelValues(b.Name, result).Inc()
	// Only now: JetStream holds the command. A lost ack redelivers the
	// message, which makes the same command again, with the same id.
	if err := m.Ack(); err != nil {
		d.log.Warn("ack binding message", "err", err)
	}
	d.log.Debug("binding message published", "idempotency_key", key, "shard", shard, "duplicate", ack.Duplicate)
}
