package client

import "github.com/harvest-engine/harvest/api"

// The JSON bodies of Harvest's HTTP API are package api's; each is
// re-exported here under its own name, so that a user of the client need
// not import api. The Client's methods wrap them into friendlier results
// (StartResult, CommandStatus, …); use the types directly to speak to
// routes the Client has no method for.

// StartRequest is api.StartRequest.
type StartRequest = api.StartRequest

// StartPolicy is api.StartPolicy.
type StartPolicy = api.StartPolicy

// Throttle is api.Throttle.
type Throttle = api.Throttle

// Debounce is api.Debounce.
type Debounce = api.Debounce

// Batch is api.Batch.
type Batch = api.Batch

// Concurrency is api.Concurrency.
type Concurrency = api.Concurrency

// ConcurrencyResponse is api.ConcurrencyResponse.
type ConcurrencyResponse = api.ConcurrencyResponse

// StartResponse is api.StartResponse.
type StartResponse = api.StartResponse

// AcceptedResponse is api.AcceptedResponse.
type AcceptedResponse = api.AcceptedResponse

// SignalResponse is api.SignalResponse.
type SignalResponse = api.SignalResponse

// SignalWithStartRequest is api.SignalWithStartRequest.
type SignalWithStartRequest = api.SignalWithStartRequest

// SignalWithStartResponse is api.SignalWithStartResponse.
type SignalWithStartResponse = api.SignalWithStartResponse

// CancelRequest is api.CancelRequest.
type CancelRequest = api.CancelRequest

// CancelResponse is api.CancelResponse.
type CancelResponse = api.CancelResponse

// TerminateRequest is api.TerminateRequest.
type TerminateRequest = api.TerminateRequest

// TerminateResponse is api.TerminateResponse.
type TerminateResponse = api.TerminateResponse

// PendingActivity is api.PendingActivity.
type PendingActivity = api.PendingActivity

// Waiting is api.Waiting, Wait api.Wait and WaitCase api.WaitCase: what
// a running execution's workflow code waits for (Execution.WaitingOn).
type (
	Waiting  = api.Waiting
	Wait     = api.Wait
	WaitCase = api.WaitCase
)

// CountExecutionsResponse is api.CountExecutionsResponse.
type CountExecutionsResponse = api.CountExecutionsResponse

// ResetRequest is api.ResetRequest.
type ResetRequest = api.ResetRequest

// ResetPoint is api.ResetPoint.
type ResetPoint = api.ResetPoint

// ResetResponse is api.ResetResponse.
type ResetResponse = api.ResetResponse

// ResetPlan is api.ResetPlan.
type ResetPlan = api.ResetPlan

// ResetActivity is api.ResetActivity.
type ResetActivity = api.ResetActivity

// ResetTimer is api.ResetTimer.
type ResetTimer = api.ResetTimer

// ResetSignal is api.ResetSignal.
type ResetSignal = api.ResetSignal

// CommandResponse is api.CommandResponse.
type CommandResponse = api.CommandResponse

// ListExecutionsResponse is api.ListExecutionsResponse.
type ListExecutionsResponse = api.ListExecutionsResponse

// HistoryResponse is api.HistoryResponse.
type HistoryResponse = api.HistoryResponse

// State is api.State.
type State = api.State

// ListStatesResponse is api.ListStatesResponse.
type ListStatesResponse = api.ListStatesResponse

// ListDeadCommandsResponse is api.ListDeadCommandsResponse.
type ListDeadCommandsResponse = api.ListDeadCommandsResponse

// AdmissionGate is api.AdmissionGate.
type AdmissionGate = api.AdmissionGate

// WorkflowSummary is api.WorkflowSummary.
type WorkflowSummary = api.WorkflowSummary

// ListWorkflowsResponse is api.ListWorkflowsResponse.
type ListWorkflowsResponse = api.ListWorkflowsResponse

// WorkflowVersionsResponse is api.WorkflowVersionsResponse.
type WorkflowVersionsResponse = api.WorkflowVersionsResponse

// BuildCount is api.BuildCount.
type BuildCount = api.BuildCount

// ChangeVersions is api.ChangeVersions.
type ChangeVersions = api.ChangeVersions

// VersionCount is api.VersionCount.
type VersionCount = api.VersionCount

// ListWebhooksResponse is api.ListWebhooksResponse.
type ListWebhooksResponse = api.ListWebhooksResponse

// WebhookSource is api.WebhookSource.
type WebhookSource = api.WebhookSource

// RoutingRule is api.RoutingRule.
type RoutingRule = api.RoutingRule

// WebhookCounts is api.WebhookCounts.
type WebhookCounts = api.WebhookCounts

// WebhookRefusals is api.WebhookRefusals.
type WebhookRefusals = api.WebhookRefusals

// BindingSummary is api.BindingSummary.
type BindingSummary = api.BindingSummary

// BindingCounts is api.BindingCounts.
type BindingCounts = api.BindingCounts

// CloseAdmissionRequest is api.CloseAdmissionRequest.
type CloseAdmissionRequest = api.CloseAdmissionRequest

// ListAdmissionResponse is api.ListAdmissionResponse.
type ListAdmissionResponse = api.ListAdmissionResponse

// RunRequest is api.RunRequest.
type RunRequest = api.RunRequest

// RunResponse is api.RunResponse.
type RunResponse = api.RunResponse

// ExternalResponse is api.ExternalResponse.
type ExternalResponse = api.ExternalResponse

// HookResponse is api.HookResponse.
type HookResponse = api.HookResponse

// HealthResponse is api.HealthResponse.
type HealthResponse = api.HealthResponse

// ReadinessResponse is api.ReadinessResponse.
type ReadinessResponse = api.ReadinessResponse

// FailingShard is api.FailingShard.
type FailingShard = api.FailingShard

// The values of Debounce.Input.
const (
	DebounceInputLast  = api.DebounceInputLast
	DebounceInputFirst = api.DebounceInputFirst
)

// Command states: CommandResponse.Status.
const (
	CommandAccepted = api.CommandAccepted
	CommandApplied  = api.CommandApplied
	CommandRejected = api.CommandRejected
	CommandDeferred = api.CommandDeferred
)

// Admission gate states: AdmissionGate.State.
const (
	AdmissionClosed = api.AdmissionClosed
	AdmissionOpen   = api.AdmissionOpen
)

// ReadinessResponse's Status values.
const (
	ReadyStatusReady    = api.ReadyStatusReady
	ReadyStatusDegraded = api.ReadyStatusDegraded
	ReadyStatusNotReady = api.ReadyStatusNotReady
)

// ListChildrenResponse is api.ListChildrenResponse.
type ListChildrenResponse = api.ListChildrenResponse

// Child is api.Child.
type Child = api.Child
