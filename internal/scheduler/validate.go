package scheduler

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/startpolicy"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/wire"
)

// validUUID says whether s is an execution id in its canonical form: 36
// characters, lower-case hex digits with hyphens, as the scheduler mints
// them and as they are stored. The stores, the caches and the subjects
// compare ids as strings, so another spelling of the same UUID would not
// find its execution.
func validUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

// validDuplicate says whether d names one layer and one key: a start's,
// an execution's signal's, or a signal-with-start's signal's.
func validDuplicate(d *wire.DuplicateCommand) bool {
	if d == nil || (d.Layer != wire.DuplicateBroker && d.Layer != wire.DuplicateReplay) {
		return false
	}
	switch {
	case d.IdempotencyKey != "":
		return d.WorkflowName != "" && d.ExecutionID == "" && d.WorkflowID == "" && d.SignalKey == ""
	case d.ExecutionID != "":
		return validUUID(d.ExecutionID) && d.SignalKey != "" && d.WorkflowName == "" && d.WorkflowID == ""
	default:
		return d.WorkflowName != "" && d.WorkflowID != "" && d.SignalKey != ""
	}
}

// validVersioning says whether a start's versioning is one the scheduler
// knows: auto_upgrade (or none), or pinned, to a valid build id or to
// the build of its first workflow task.
func validVersioning(s *wire.StartCommand) bool {
	switch s.Versioning {
	case "", wire.VersioningAutoUpgrade:
		return s.PinnedBuild == ""
	case wire.VersioningPinned:
		return s.PinnedBuild == "" || dedup.ValidateBuildID(s.PinnedBuild) == nil
	default:
		return false
	}
}

// validPolicy says whether a start's policy, if it has one, is one the
// scheduler can apply: a known kind with its parameters in range, on a
// start as ingest makes them under a policy (no idempotency key, reuse
// policy or delay; a minted workflow_id).
func validPolicy(s *wire.StartCommand) bool {
	p := s.Policy
	if p == nil {
		return true
	}
	keyed := s.IdempotencyKey != "" && p.Kind != wire.PolicyConcurrency
	if keyed || !s.WorkflowIDMinted || s.ReusePolicy != "" || s.StartAt != nil || len(p.Key) > startpolicy.MaxKeyBytes {
		return false
	}
	inRange := func(d time.Duration) bool { return d > 0 && d <= startpolicy.MaxPeriod }
	switch p.Kind {
	case wire.PolicyThrottle:
		return p.Limit > 0 && p.Limit <= startpolicy.MaxLimit && inRange(p.Period)
	case wire.PolicyDebounce:
		return inRange(p.Period)
	case wire.PolicyBatch:
		return p.MaxSize > 0 && p.MaxSize <= startpolicy.MaxBatchSize && inRange(p.MaxWait)
	case wire.PolicyConcurrency:
		return p.Limit > 0 && p.Limit <= startpolicy.MaxLimit
	}
	return false
}

// validState says why a query state a worker sent cannot be stored: a
// name that is no name, a value larger than wire.MaxStateBytes or one
// PostgreSQL cannot store; nil when it can.
func validState(s wire.StateValue) error {
	if err := dedup.ValidateName(s.Name); err != nil {
		return fmt.Errorf("query state: %w", err)
	}
	if len(s.Value) > wire.MaxStateBytes {
		return fmt.Errorf("query state %q: %d bytes, more than %d", s.Name, len(s.Value), wire.MaxStateBytes)
	}
	if err := storable.CheckJSON(s.Value); err != nil {
		return fmt.Errorf("query state %q: %w", s.Name, err)
	}
	return nil
}

// maxWaitingBytes bounds what a worker says its workflow code waits for,
// as JSON: api.MaxWaits waits of a selector's api.MaxWaits cases each
// are far less, unless names are long.
const maxWaitingBytes = 64 << 10

// validWaiting checks what a worker says its workflow code waits for.
func validWaiting(w *api.Waiting) error {
	if len(w.Waits) > api.MaxWaits {
		return fmt.Errorf("waiting: %d waits, more than %d", len(w.Waits), api.MaxWaits)
	}
	for _, wait := range w.Waits {
		if len(wait.Cases) > api.MaxWaits {
			return fmt.Errorf("waiting: a selector of %d cases, more than %d", len(wait.Cases), api.MaxWaits)
		}
	}
	raw, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("waiting: %w", err)
	}
	if len(raw) > maxWaitingBytes {
		return fmt.Errorf("waiting: %d bytes, more than %d", len(raw), maxWaitingBytes)
	}
	if err := storable.CheckJSON(raw); err != nil {
		return fmt.Errorf("waiting: %w", err)
	}
	return nil
}

// validBatchSpec says whether a batch's spec is one its parts can run:
// a known operation with what it needs, a rate, a filter that names a
// condition or says all.
func validBatchSpec(s *wire.BatchSpec) bool {
	if s == nil || s.Rate < 1 || s.Before.IsZero() {
		return false
	}
	f := s.Filter
	if !f.All && f.Workflow == "" && f.Status == "" && f.CreatedAfter == nil && f.CreatedBefore == nil && f.KeyPrefix == "" && f.WorkflowIDPrefix == "" &&
		len(f.Search) == 0 {
		return false
	}
	switch s.Operation {
	case wire.BatchOperationCancel, wire.BatchOperationTerminate:
		return true
	case wire.BatchOperationSignal:
		return s.Signal != nil && s.Signal.Name != ""
	case wire.BatchOperationReset:
		return s.Reset != nil
	}
	return false
}
