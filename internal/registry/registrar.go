package registry

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/broker"
)

// RegistrarConfig configures a Registrar.
type RegistrarConfig struct {
	// JS finds the workers bucket when KV is nil (a deployment declared
	// by services older than the worker); the Registrar keeps looking.
	JS jetstream.JetStream
	// KV is the workers bucket, when bound.
	KV jetstream.KeyValue
	// Worker identifies this worker; letters, digits, '_' and '-'.
	Worker    string
	TaskQueue string
	// BuildID is the worker's build id (harvesttype.WorkerConfig.BuildID,
	// or DefaultBuildID), shown in its record.
	BuildID string
	// Workflows and Activities are the names the worker serves.
	Workflows  []string
	Activities []string
	// ReplayRefused are the workflows the worker's replay check refused,
	// shown in its record.
	ReplayRefused []Refusal
	// Load, when set, tells the worker's slots in use; the Registrar calls
	// it at each put (in Start, then from its own goroutine), so it must
	// be safe for concurrent use, and writes what it returns in the
	// worker's record. Unset, the record carries no load.
	Load func() Load
	Log  *slog.Logger
}

// Registrar keeps one worker's registrations and its record in the
// workers bucket: put at Start and every third of the registration TTL
// after, removed at Stop. Failures are logged and retried; they never
// stop the worker.
type Registrar struct {
	cfg   RegistrarConfig
	keys  []string
	host  string
	pid   int
	build string

	mu      sync.Mutex
	kv      jetstream.KeyValue
	ttl     time.Duration
	started time.Time
	// arrived is when the worker's build arrived (Entry.Arrived).
	arrived time.Time
	stop    func()
}

// NewRegistrar returns a Registrar for cfg.
func NewRegistrar(cfg RegistrarConfig) *Registrar {
	cfg.Log = cmp.Or(cfg.Log, slog.New(slog.DiscardHandler))
	r := &Registrar{cfg: cfg, kv: cfg.KV, pid: os.Getpid()}
	r.host, _ = os.Hostname()
	info, _ := debug.ReadBuildInfo()
	r.build = BuildOf(info)
	for _, name := range cfg.Workflows {
		r.keys = append(r.keys, Key(KindWorkflow, name, cfg.TaskQueue, cfg.Worker))
	}
	for _, name := range cfg.Activities {
		r.keys = append(r.keys, Key(KindActivity, name, cfg.TaskQueue, cfg.Worker))
	}
	return r
}

// firstPutTimeout bounds Start's registration; a slower one is left to
// the loop.
const firstPutTimeout = 5 * time.Second

// Start registers the worker's names once, then keeps them registered
// until Stop. A failure to register is logged, and tried again.
func (r *Registrar) Start(ctx context.Context) {
	now := time.Now().UTC()
	pctx, cancel := context.WithTimeout(ctx, firstPutTimeout)
	arrived := r.arrival(pctx, now)
	r.mu.Lock()
	r.started, r.arrived = now, arrived
	r.mu.Unlock()
	err := r.put(pctx)
	cancel()
	if err != nil {
		r.cfg.Log.Warn("register workflows and activities; retrying", "err", err)
	}
	loopCtx, stopLoop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.loop(loopCtx, err != nil)
	}()
	r.mu.Lock()
	r.stop = func() {
		stopLoop()
		<-done
	}
	r.mu.Unlock()
}

// retryInterval is how soon a failed registration is tried again.
const retryInterval = time.Second

func (r *Registrar) loop(ctx context.Context, failed bool) {
	for {
		wait := r.interval()
		if failed {
			wait = min(wait, retryInterval)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, max(r.interval(), time.Second))
		err := r.put(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			r.cfg.Log.Warn("renew worker registration; retrying", "err", err)
		}
		failed = err != nil
	}
}

// interval is a third of the registration TTL.
func (r *Registrar) interval() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return max(cmp.Or(r.ttl, broker.DefaultWorkerTTL)/3, 100*time.Millisecond)
}

// bucket returns the workers bucket and the registration TTL, looking
// them up the first time.
func (r *Registrar) bucket(ctx context.Context) (jetstream.KeyValue, time.Duration, error) {
	r.mu.Lock()
	kv, ttl := r.kv, r.ttl
	r.mu.Unlock()
	if kv != nil && ttl > 0 {
		return kv, ttl, nil
	}
	if kv == nil {
		if r.cfg.JS == nil {
			return nil, 0, fmt.Errorf("bind bucket %s: %w", broker.WorkersBucket, broker.ErrNotDeclared)
		}
		var err error
		if kv, err = r.cfg.JS.KeyValue(ctx, broker.WorkersBucket); err != nil {
			if errors.Is(err, jetstream.ErrBucketNotFound) {
				err = broker.ErrNotDeclared
			}
			return nil, 0, fmt.Errorf("bind bucket %s: %w", broker.WorkersBucket, err)
		}
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("read bucket %s: %w", broker.WorkersBucket, err)
	}
	ttl = cmp.Or(st.TTL(), broker.DefaultWorkerTTL)
	r.mu.Lock()
	r.kv, r.ttl = kv, ttl
	r.mu.Unlock()
	return kv, ttl, nil
}

// put writes every registration with a new expiry, then the worker's
// record: the names first, since routing reads them.
func (r *Registrar) put(ctx context.Context) error {
	kv, ttl, err := r.bucket(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	started, arrived := r.started, r.arrived
	r.mu.Unlock()
	entry := Entry{Worker: r.cfg.Worker, Host: r.host, ExpiresAt: time.Now().Add(ttl).UTC(), BuildID: r.cfg.BuildID, StartedAt: started, Arrived: arrived}
	value, err := json.Marshal(entry)
	if err != nil {
		return fmt.Errorf("encode registration: %w", err)
	}
	for _, key := range r.keys {
		if _, err := kv.Put(ctx, key, value); err != nil {
			return fmt.Errorf("put registration %s: %w", key, err)
		}
	}
	record, err := json.Marshal(r.record(entry))
	if err != nil {
		return fmt.Errorf("encode worker record: %w", err)
	}
	key := RecordKey(r.cfg.Worker)
	if _, err := kv.Put(ctx, key, record); err != nil {
		return fmt.Errorf("put worker record %s: %w", key, err)
	}
	return nil
}

// record is the worker's record as of now, holding entry.
func (r *Registrar) record(entry Entry) Record {
	rec := Record{Entry: entry, PID: r.pid, Build: r.build, TaskQueue: r.cfg.TaskQueue,
		Workflows: nonNil(r.cfg.Workflows), Activities: nonNil(r.cfg.Activities), ReplayRefused: r.cfg.ReplayRefused}
	if r.cfg.Load != nil {
		load := r.cfg.Load()
		rec.Load = &load
	}
	return rec
}

// arrival is when the worker's build arrived: as the live workers of its
// build that register its workflows say, else now (none runs, or the
// bucket cannot be read now).
func (r *Registrar) arrival(ctx context.Context, now time.Time) time.Time {
	if r.cfg.BuildID == "" || len(r.cfg.Workflows) == 0 {
		return now
	}
	kv, _, err := r.bucket(ctx)
	if err != nil {
		return now
	}
	at, err := BuildArrival(ctx, kv, r.cfg.Workflows, r.cfg.TaskQueue, r.cfg.BuildID, now)
	if err != nil {
		r.cfg.Log.Warn("look up when the worker's build arrived; taking its start", "err", err)
		return now
	}
	if at.IsZero() {
		return now
	}
	return at
}

// Stop stops renewing and removes the worker's registrations; what it
// cannot remove ages out within the TTL. Safe to call twice.
func (r *Registrar) Stop(ctx context.Context) error {
	r.mu.Lock()
	stop := r.stop
	r.stop = nil
	kv := r.kv
	r.mu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	if kv == nil {
		return nil
	}
	var errs []error
	for _, key := range append(slices.Clone(r.keys), RecordKey(r.cfg.Worker)) {
		if err := kv.Delete(ctx, key); err != nil {
			errs = append(errs, fmt.Errorf("remove registration %s: %w", key, err))
		}
	}
	return errors.Join(errs...)
}
