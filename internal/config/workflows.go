package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/binding"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/schedspec"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/startpolicy"
	"github.com/harvest-engine/harvest/internal/wire"
)

// WorkflowConfig is the per-workflow part of Config.
type WorkflowConfig struct {
	// IdempotencyFingerprint overrides the deployment's setting.
	IdempotencyFingerprint string `yaml:"idempotency_fingerprint"`
	// Retention overrides the deployment's retention for this workflow's
	// closed executions.
	Retention Duration `yaml:"retention"`
	// StartPolicy throttles, debounces or batches the workflow's starts
	// (docs/start-policies.md).
	StartPolicy *api.StartPolicy `yaml:"start_policy"`
	// TaskQueue is the task queue the workflow's starts go to when the
	// start names none (every start ingest makes: the API's, webhook and
	// binding rules', ArcFlow runs), default "default". A declared
	// workflow is accepted on this queue while no worker serves it.
	TaskQueue string `yaml:"task_queue"`
	// Versioning routes the workflow's executions among builds
	// (docs/versioning.md#pinned-workflows): "pinned" keeps each on the
	// build that ran its first workflow task, "auto_upgrade" (the
	// default) moves it to the newest build that registers the workflow.
	// A start's versioning overrides it.
	Versioning string `yaml:"versioning"`
	// CancelGrace bounds how long an execution of the workflow asked to
	// cancel may run before it is terminated (docs/cancellation.md); a
	// cancel's own cancel_grace overrides it. Unset: no bound, the
	// workflow code closes it.
	CancelGrace Duration `yaml:"cancel_grace"`
	// RunTimeout bounds each run of the workflow, ExecutionTimeout its
	// whole chain of continued runs (docs/cancellation.md#timeouts): past
	// it the execution closes TimedOut (after its cleanup, within
	// cancel_grace, when it has one). A start's own override them.
	RunTimeout       Duration `yaml:"run_timeout"`
	ExecutionTimeout Duration `yaml:"execution_timeout"`
	// SearchAttributes declares the workflow's search attributes
	// (docs/search-attributes.md), each name with its type: keyword, int,
	// double, bool or time. A start and the workflow code set only these.
	SearchAttributes map[string]string `yaml:"search_attributes"`
}

// SearchAttributes returns the declared search attributes, by workflow.
func (c Config) SearchAttributes() searchattr.Schema {
	out := searchattr.Schema{}
	for name, w := range c.Workflows {
		if len(w.SearchAttributes) > 0 {
			out[name] = maps.Clone(w.SearchAttributes)
		}
	}
	return out
}

// DeclaredWorkflows are the workflows the configuration declares: those
// under workflows, and the targets of the bindings' rules (ingest adds
// the webhooks' own).
func (c Config) DeclaredWorkflows() []string {
	out := make([]string, 0, len(c.Workflows))
	for name := range c.Workflows {
		out = append(out, name)
	}
	slices.Sort(out)
	return append(out, binding.Workflows(c.Bindings)...)
}

// RetentionByWorkflow returns the per-workflow retentions.
func (c Config) RetentionByWorkflow() map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, w := range c.Workflows {
		if w.Retention > 0 {
			out[name] = time.Duration(w.Retention)
		}
	}
	return out
}

// DeclaredWorkflowQueues returns the declared workflows (DeclaredWorkflows),
// each with the task queue it is declared on ("" for default).
func (c Config) DeclaredWorkflowQueues() map[string]string {
	out := map[string]string{}
	for _, name := range c.DeclaredWorkflows() {
		out[name] = c.Workflows[name].TaskQueue
	}
	return out
}

// CancelGraceByWorkflow returns the per-workflow cancel graces.
func (c Config) CancelGraceByWorkflow() map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, w := range c.Workflows {
		if w.CancelGrace > 0 {
			out[name] = time.Duration(w.CancelGrace)
		}
	}
	return out
}

// TimeoutsByWorkflow returns the per-workflow run and execution timeouts.
func (c Config) TimeoutsByWorkflow() map[string]scheduler.WorkflowTimeouts {
	out := map[string]scheduler.WorkflowTimeouts{}
	for name, w := range c.Workflows {
		if w.RunTimeout > 0 || w.ExecutionTimeout > 0 {
			out[name] = scheduler.WorkflowTimeouts{Run: time.Duration(w.RunTimeout), Execution: time.Duration(w.ExecutionTimeout)}
		}
	}
	return out
}

// StartPolicies returns the workflows' start policies, checked (Validate
// reports one that is not).
func (c Config) StartPolicies() map[string]*startpolicy.Policy {
	out := map[string]*startpolicy.Policy{}
	for name, w := range c.Workflows {
		if p, err := startpolicy.Parse(w.StartPolicy); err == nil && p != nil {
			out[name] = p
		}
	}
	return out
}

// PinnedWorkflows returns the workflows configured with versioning:
// pinned.
func (c Config) PinnedWorkflows() map[string]bool {
	out := map[string]bool{}
	for name, w := range c.Workflows {
		if w.Versioning == wire.VersioningPinned {
			out[name] = true
		}
	}
	return out
}

// TaskQueues returns the workflows' configured task queues, by workflow;
// a workflow with none is absent (its starts go to "default").
func (c Config) TaskQueues() map[string]string {
	return c.byWorkflow(func(w WorkflowConfig) string { return w.TaskQueue })
}

// FingerprintByWorkflow returns the per-workflow fingerprint modes.
func (c Config) FingerprintByWorkflow() map[string]string {
	return c.byWorkflow(func(w WorkflowConfig) string { return w.IdempotencyFingerprint })
}

// byWorkflow returns, by workflow, the setting field reads from its
// configuration; a workflow that leaves it empty is absent.
func (c Config) byWorkflow(field func(WorkflowConfig) string) map[string]string {
	out := map[string]string{}
	for name, w := range c.Workflows {
		if v := field(w); v != "" {
			out[name] = v
		}
	}
	return out
}

// ScheduleConfig is a schedule the configuration declares
// (schedules.<id>): the body of PUT /api/harvest/schedules/{id}, its
// input as YAML.
type ScheduleConfig struct {
	api.ScheduleRequest `yaml:",inline"`
	Input               any            `yaml:"input"`
	SearchAttributes    map[string]any `yaml:"search_attributes"`
}

// ScheduleRequests are the declared schedules as the API takes them, by
// id.
func (c *Config) ScheduleRequests() (map[string]api.ScheduleRequest, error) {
	if len(c.Schedules) == 0 {
		return nil, nil
	}
	out := make(map[string]api.ScheduleRequest, len(c.Schedules))
	for id, sc := range c.Schedules {
		req := sc.ScheduleRequest
		if sc.Input != nil {
			raw, err := json.Marshal(sc.Input)
			if err != nil {
				return nil, fmt.Errorf("config: schedules.%s.input: %w", id, err)
			}
			req.Input = raw
		}
		for name, v := range sc.SearchAttributes {
			raw, err := json.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("config: schedules.%s.search_attributes.%s: %w", id, name, err)
			}
			if req.SearchAttributes == nil {
				req.SearchAttributes = map[string]json.RawMessage{}
			}
			req.SearchAttributes[name] = raw
		}
		out[id] = req
	}
	return out, nil
}

// validateSchedules checks the declared schedules as the API would.
func (c *Config) validateSchedules() error {
	reqs, err := c.ScheduleRequests()
	if err != nil {
		return err
	}
	for _, id := range slices.Sorted(maps.Keys(reqs)) {
		req := reqs[id]
		if !schedspec.ValidID(id) {
			return fmt.Errorf("config: schedules.%s: want an id of 1 to 128 letters, digits, '_', '-' or '.'", id)
		}
		if err := dedup.ValidateName(req.Workflow); err != nil {
			return fmt.Errorf("config: schedules.%s.workflow: %w", id, err)
		}
		if req.TaskQueue != "" && dedup.ValidateName(req.TaskQueue) != nil {
			return fmt.Errorf("config: schedules.%s.task_queue %q: want a task queue name", id, req.TaskQueue)
		}
		if _, err := schedspec.CheckRequest(&req); err != nil {
			var fe *schedspec.FieldError
			if errors.As(err, &fe) {
				return fmt.Errorf("config: schedules.%s.%s: %s", id, fe.Field, strings.TrimPrefix(fe.Message, fe.Field+": "))
			}
			return fmt.Errorf("config: schedules.%s: %w", id, err)
		}
		if err := c.SearchAttributes().Check(req.Workflow, req.SearchAttributes); err != nil {
			return fmt.Errorf("config: schedules.%s.search_attributes: %w", id, err)
		}
	}
	return nil
}
