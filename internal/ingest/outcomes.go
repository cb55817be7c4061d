package ingest

import (
	"encoding/json"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/harvest-engine/harvest/internal/streams"
	"github.com/harvest-engine/harvest/internal/wire"
)

// outcomeWaiters hands outcomes, as the scheduler stores them, to the
// requests waiting for them. One subscription serves every request.
type outcomeWaiters struct {
	mu      sync.Mutex
	waiting map[string]map[chan wire.Outcome]struct{}
}

func newOutcomeWaiters() *outcomeWaiters {
	return &outcomeWaiters{waiting: map[string]map[chan wire.Outcome]struct{}{}}
}

// wait registers interest in commandID's outcomes; call cancel when done.
func (o *outcomeWaiters) wait(commandID string) (ch chan wire.Outcome, cancel func()) {
	ch = make(chan wire.Outcome, 4)
	o.mu.Lock()
	set := o.waiting[commandID]
	if set == nil {
		set = map[chan wire.Outcome]struct{}{}
		o.waiting[commandID] = set
	}
	set[ch] = struct{}{}
	o.mu.Unlock()
	return ch, func() {
		o.mu.Lock()
		delete(set, ch)
		if len(set) == 0 {
			delete(o.waiting, commandID)
		}
		o.mu.Unlock()
	}
}

// deliver is the subscription's handler.
func (o *outcomeWaiters) deliver(m *nats.Msg) {
	id := streams.OutcomeCommandID(m.Subject)
	if id == "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	set := o.waiting[id]
	if len(set) == 0 {
		return
	}
	var out wire.Outcome
	if err := json.Unmarshal(m.Data, &out); err != nil {
		return
	}
	for ch := range set {
		select {
		case ch <- out:
		default:
		}
	}
}
