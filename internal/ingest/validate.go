package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/callback"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/startpolicy"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Limits of a start's own checks.
const (
	// admissionRetryAfter is the Retry-After of a start refused by a
	// closed admission gate, in seconds.
	admissionRetryAfter = "30"
	maxWorkflowIDBytes  = dedup.MaxWorkflowIDBytes
)

// rejection is an answer that refuses a start, unless the start is a
// replay of a committed keyed start.
type rejection struct {
	status     int
	body       api.ErrorResponse
	retryAfter string
}

func reject(status int, code, field, message string) *rejection {
	return &rejection{status: status, body: api.ErrorResponse{Error: code, Message: message, Field: field}}
}

// parsedStart is a start request that passed every check of its own.
type parsedStart struct {
	name       string
	key        string
	workflowID string
	startAt    *time.Time
	// runTimeout and executionTimeout are the start's own, 0 for none.
	runTimeout, executionTimeout time.Duration
	req                          api.StartRequest
	// policy is the start policy that admits the start, bound to its
	// input; nil for a start under none.
	policy *wire.StartPolicy
	// store is the store the start is pinned to, "" for none.
	store string
	// taskQueue is the task queue the start goes to: the request's, else
	// its workflow's configured one, else the default.
	taskQueue string
	// versioning and pinnedBuild are the command's (startVersioning).
	versioning, pinnedBuild string
}

// parseStart reads and checks a start request. It returns the key it
// found (from the header, or else the body) even when it rejects the
// request, so a replay of a committed keyed start can still be answered.
func (s *Server) parseStart(w http.ResponseWriter, r *http.Request) (p parsedStart, keyErr error, rej *rejection) {
	p.name = r.PathValue("name")
	if vals, ok := r.Header[http.CanonicalHeaderKey("Idempotency-Key")]; ok {
		// The header wins over the body field, and is honoured even when
		// the body does not parse.
		if p.key, keyErr = dedup.ValidateKey(strings.Join(vals, ",")); keyErr != nil {
			return p, keyErr, nil
		}
	}
	if err := dedup.ValidateName(p.name); err != nil {
		return p, nil, reject(http.StatusBadRequest, api.CodeInvalidWorkflowName, "name", err.Error())
	}
	body, rej := s.readBody(w, r)
	if rej != nil {
		return p, nil, rej
	}
	// A member the body should not have is refused like a bad value:
	// after the key is found, so that a keyed replay is answered first.
	var unknown, unstorable *rejection
	if len(body) > 0 {
		if unknown, rej = decodeObject(body, &p.req, "a start's body"); rej != nil {
			return p, nil, rej
		}
		if unstorable = unstorableBody(body, startMembers); unstorable != nil && p.key == "" {
			if keyErr = unstorableKey(body); keyErr != nil {
				return p, keyErr, nil
			}
		}
	}
	if p.key == "" && p.req.IdempotencyKey != nil {
		if p.key, keyErr = dedup.ValidateKey(*p.req.IdempotencyKey); keyErr != nil {
			return p, keyErr, nil
		}
	}
	if unknown != nil {
		return p, nil, unknown
	}
	if unstorable != nil {
		return p, nil, unstorable
	}
	return p, nil, s.checkStart(r.Context(), &p)
}

// checkStart finds the task queue the start goes to and checks that a
// worker serves the workflow there or the configuration declares it
// there, then a decoded start request's fields, the workflow's input
// schema and its admission gate.
func (s *Server) checkStart(ctx context.Context, p *parsedStart) (rej *rejection) {
	if p.taskQueue, rej = s.startQueue(p.name, p.req.TaskQueue); rej != nil {
		return rej
	}
	if rej := s.checkKnown(ctx, p.name, p.taskQueue); rej != nil {
		return rej
	}
	if p.versioning, p.pinnedBuild, rej = s.startVersioning(ctx, p.name, p.taskQueue, p.req.Versioning, p.req.BuildID); rej != nil {
		return rej
	}
	if p.req.WorkflowID != nil {
		p.workflowID = *p.req.WorkflowID
		if strings.TrimSpace(p.workflowID) == "" || len(p.workflowID) > maxWorkflowIDBytes {
			return reject(http.StatusBadRequest, api.CodeInvalidWorkflowID, "workflow_id",
				fmt.Sprintf("workflow_id must be 1 to %d bytes and not blank", maxWorkflowIDBytes))
		}
		if err := storable.CheckIdentifier(p.workflowID); err != nil {
			return reject(http.StatusBadRequest, api.CodeInvalidWorkflowID, "workflow_id", "workflow_id "+err.Error())
		}
	}
	if rej := s.checkSearchAttributes(p.name, p.req.SearchAttributes); rej != nil {
		return rej
	}
	if !wire.ValidReusePolicy(p.req.ReusePolicy) {
		return reject(http.StatusBadRequest, api.CodeInvalidReusePolicy, "reuse_policy",
			fmt.Sprintf("reuse_policy %q: want allow_duplicate, allow_duplicate_failed_only, reject_duplicate or terminate_if_running", p.req.ReusePolicy))
	}
	if p.startAt, rej = s.parseSchedule(p.req); rej != nil {
		return rej
	}
	if p.runTimeout, p.executionTimeout, rej = parseTimeouts(p.req); rej != nil {
		return rej
	}
	if rej := checkPriority(p.req.Priority); rej != nil {
		return rej
	}
	if len(p.req.Input) == 0 {
		p.req.Input = nil
	}
	if rej := s.checkPolicy(p); rej != nil {
		return rej
	}
	if p.req.Store != nil {
		if _, err := s.cfg.Topology.Layout().Set.Pinned(*p.req.Store); err != nil {
			return reject(http.StatusBadRequest, api.CodeInvalidStore, "store", fmt.Sprintf("store: %v: a pinned start goes to its store or is refused", err))
		}
		if p.policy != nil {
			return reject(http.StatusBadRequest, api.CodeInvalidStore, "store", "a start under a start policy goes to the store of its policy key: it takes no store")
		}
		p.store = *p.req.Store
	}
	if p.req.CompletionCallback != nil {
		if rej := s.checkCallback(ctx, *p.req.CompletionCallback); rej != nil {
			return rej
		}
	}
	if sch, ok := s.schemas.get(p.name); ok {
		if violations := sch.Validate(p.req.Input); len(violations) > 0 {
			rej := reject(http.StatusUnprocessableEntity, api.CodeInputInvalid, "input",
				fmt.Sprintf("input does not match the schema of %s: %s at %q", p.name, violations[0].Message, violations[0].Field))
			rej.body.Violations = violationsOf(violations)
			return rej
		}
	}
	if g, closed := s.admission.get(p.name); closed {
		rej := reject(http.StatusServiceUnavailable, api.CodeAdmissionBlocked, "",
			fmt.Sprintf("starts of %s are paused since %s: %s", p.name, g.ClosedAt.Format(time.RFC3339), g.Reason))
		rej.retryAfter = admissionRetryAfter
		return rej
	}
	return nil
}

// checkCallback vets a completion_callback target: it must resolve to
// public addresses unless its host is allow-listed.
func (s *Server) checkCallback(ctx context.Context, target string) *rejection {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := s.cfg.CallbackPolicy.Validate(ctx, target)
	var refused *callback.RejectedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &refused):
		// The answer says what the host resolves to only by category, or
		// anyone with a start token could map internal names; the
		// address goes to the log.
		s.log.Info("completion_callback refused", "request_id", requestIDOf(ctx), "err", err)
		return reject(http.StatusUnprocessableEntity, api.CodeCallbackRejected, "completion_callback",
			callback.ErrRejected.Error()+": "+refused.Reason)
	default:
		// The resolver's error names the resolver: it stays in the log.
		s.log.Warn("check a completion_callback target", "request_id", requestIDOf(ctx), "err", err)
		rej := reject(http.StatusServiceUnavailable, api.CodeCallbackUnverifiable, "completion_callback",
			"could not resolve the completion_callback target's host; retry")
		rej.retryAfter = "5"
		return rej
	}
}

// checkPriority refuses a start's priority outside MinPriority to
// MaxPriority; nil (absent) is the default.
func checkPriority(v *int) *rejection {
	if v != nil && (*v < api.MinPriority || *v > api.MaxPriority) {
		return reject(http.StatusBadRequest, api.CodeInvalidPriority, "priority",
			fmt.Sprintf("priority %d: want %d (lowest) to %d (highest); %d is the default", *v, api.MinPriority, api.MaxPriority, api.DefaultPriority))
	}
	return nil
}

// priorityOf is a checked priority as a command carries it: 0 (the
// default) when absent.
func priorityOf(v *int) int {
	if v == nil {
		return 0
	}
	return *v
}

// parseTimeouts reads a start's run_timeout and execution_timeout; 0 for
// one it does not give.
func parseTimeouts(req api.StartRequest) (run, execution time.Duration, rej *rejection) {
	parse := func(field string, v *string) (time.Duration, *rejection) {
		if v == nil {
			return 0, nil
		}
		d, err := time.ParseDuration(*v)
		switch {
		case err != nil:
			return 0, reject(http.StatusBadRequest, api.CodeInvalidTimeout, field, fmt.Sprintf("%s %q: want a duration such as \"30m\" or \"24h\"", field, *v))
		case d < time.Millisecond:
			return 0, reject(http.StatusBadRequest, api.CodeInvalidTimeout, field, fmt.Sprintf("%s %s: want a positive duration of at least 1ms", field, d))
		case d > scheduler.MaxTimeout:
			return 0, reject(http.StatusBadRequest, api.CodeInvalidTimeout, field, fmt.Sprintf("%s %s is beyond the maximum of ten years", field, d))
		}
		return d, nil
	}
	if run, rej = parse("run_timeout", req.RunTimeout); rej != nil {
		return 0, 0, rej
	}
	if execution, rej = parse("execution_timeout", req.ExecutionTimeout); rej != nil {
		return 0, 0, rej
	}
	if run > 0 && execution > 0 && run > execution {
		return 0, 0, reject(http.StatusBadRequest, api.CodeInvalidTimeout, "run_timeout",
			fmt.Sprintf("run_timeout %s is longer than execution_timeout %s: a run cannot outlast its chain", run, execution))
	}
	return run, execution, nil
}

// parseSchedule reads delay or start_at into the time the first workflow
// task may run; nil means now.
func (s *Server) parseSchedule(req api.StartRequest) (*time.Time, *rejection) {
	now := time.Now().UTC()
	limit := now.Add(s.cfg.MaxStartDelay)
	switch {
	case req.Delay != nil && req.StartAt != nil:
		return nil, reject(http.StatusBadRequest, api.CodeInvalidSchedule, "delay", "give delay or start_at, not both")
	case req.Delay != nil:
		d, err := time.ParseDuration(*req.Delay)
		if err != nil {
			return nil, reject(http.StatusBadRequest, api.CodeInvalidDelay, "delay", fmt.Sprintf("delay %q: want a duration such as \"10s\" or \"1h30m\"", *req.Delay))
		}
		if d < 0 {
			return nil, reject(http.StatusBadRequest, api.CodeInvalidDelay, "delay", fmt.Sprintf("delay %s is negative", d))
		}
		if d > s.cfg.MaxStartDelay {
			return nil, reject(http.StatusBadRequest, api.CodeInvalidDelay, "delay", fmt.Sprintf("delay %s is beyond the maximum of %s", d, s.cfg.MaxStartDelay))
		}
		at := now.Add(d)
		return &at, nil
	case req.StartAt != nil:
		at, err := time.Parse(time.RFC3339Nano, *req.StartAt)
		if err != nil {
			return nil, reject(http.StatusBadRequest, api.CodeInvalidStartAt, "start_at", fmt.Sprintf("start_at %q: want an RFC 3339 time such as \"2026-12-24T18:00:00Z\"", *req.StartAt))
		}
		if at.After(limit) {
			return nil, reject(http.StatusBadRequest, api.CodeInvalidStartAt, "start_at", fmt.Sprintf("start_at %s is beyond the maximum of %s ahead", at.Format(time.RFC3339), s.cfg.MaxStartDelay))
		}
		at = at.UTC()
		return &at, nil
	}
	return nil, nil
}

// checkPolicy finds the start policy that admits p (the request's own, or
// its workflow's) and binds it to p's input. A start under a policy takes
// no workflow_id (its execution's is minted on the policy's shard), no
// reuse policy and no delay; under a policy that defers it (throttle,
// debounce, batch), no idempotency key either (there is no execution for
// a retry to converge on; a keyed replay of a start committed before the
// policy came is still answered, as every refused keyed start is). A
// concurrency policy's start creates its execution at once, so it may
// carry a key.
func (s *Server) checkPolicy(p *parsedStart) *rejection {
	pol := s.cfg.StartPolicies[p.name]
	if p.req.StartPolicy != nil {
		own, err := startpolicy.Parse(p.req.StartPolicy)
		var perr *startpolicy.Error
		if errors.As(err, &perr) {
			field := "start_policy"
			if perr.Field != "" {
				field += "." + perr.Field
			}
			return reject(http.StatusBadRequest, api.CodeInvalidStartPolicy, field, fmt.Sprintf("%s: %s", field, perr.Message))
		}
		if own != nil {
			pol = own
		}
	}
	if pol == nil {
		return nil
	}
	under := fmt.Sprintf("%s starts under a %s start policy", p.name, pol.Kind())
	concurrency := pol.Kind() == wire.PolicyConcurrency
	switch {
	case p.key != "" && !concurrency:
		return reject(http.StatusBadRequest, api.CodeIdempotencyKeyNotAllowed, "idempotency_key",
			fmt.Sprintf("%s, which defers starts: a start under it takes no idempotency_key (there is no execution for a retry to converge on); webhooks and bindings dedupe by the event's id", under))
	case p.req.WorkflowID != nil:
		return reject(http.StatusBadRequest, api.CodeInvalidWorkflowID, "workflow_id",
			fmt.Sprintf("%s: a start under it takes no workflow_id (its execution's is minted when it begins)", under))
	case p.req.ReusePolicy != "":
		return reject(http.StatusBadRequest, api.CodeInvalidReusePolicy, "reuse_policy",
			fmt.Sprintf("%s: a start under it takes no reuse_policy", under))
	case p.startAt != nil:
		field := "delay"
		if p.req.StartAt != nil {
			field = "start_at"
		}
		return reject(http.StatusBadRequest, api.CodeInvalidSchedule, field, fmt.Sprintf("%s: the policy decides when it begins, so it takes no %s", under, field))
	}
	sp, err := pol.For(p.req.Input)
	if err != nil && concurrency {
		return reject(http.StatusUnprocessableEntity, api.CodeConcurrencyKeyMissing, "input", fmt.Sprintf("%s: %v", under, err))
	}
	if err != nil {
		return reject(http.StatusUnprocessableEntity, api.CodeInputInvalid, "input", fmt.Sprintf("%s: %v", under, err))
	}
	p.policy = sp
	return nil
}

// checkSearchAttributes refuses search attributes a start of workflow
// sets that it does not declare, or of another type than declared.
func (s *Server) checkSearchAttributes(workflow string, attrs map[string]json.RawMessage) *rejection {
	if len(attrs) == 0 {
		return nil
	}
	err := s.cfg.SearchAttributes.Check(workflow, attrs)
	if err == nil {
		return nil
	}
	var bad *searchattr.Error
	field := "search_attributes"
	if errors.As(err, &bad) {
		field += "." + bad.Name
	}
	return reject(http.StatusBadRequest, api.CodeInvalidSearchAttribute, field, err.Error())
}
