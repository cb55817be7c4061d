package openapi

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"

	"github.com/harvest-engine/harvest/api"
)

// Route is one operation of the API.
type Route struct {
	Method, Path string
	// ID is the operation's id, stable for generated clients.
	ID          string
	Summary     string
	Description string
	Tag         string
	// Scope is the token scope the route needs when the API has tokens;
	// empty for routes that need none.
	Scope string
	// Deprecated marks an operation kept for a release that another
	// replaces; its Description names the replacement.
	Deprecated bool
	Query      []Param
	Headers    []Param
	// Body is a value of the request body's type; nil for none.
	Body         any
	BodyRequired bool
	// Responses are the answers by status.
	Responses map[int]Answer
}

// Param is a query or header parameter.
type Param struct {
	Name        string
	Description string
	// Type is "string" (default), "integer" or "date-time".
	Type string
}

// Answer is one response of a route.
type Answer struct {
	Description string
	// Body is a value of the answer's JSON type, a text media type, or nil
	// for no body.
	Body any
}

// text is an answer that is not JSON, by its media type.
type text string

var errBody = api.ErrorResponse{}

// errs adds the error answers every route of its kind can give.
// listFilterParams are the filters a list and a count of executions
// take.
var listFilterParams = []Param{
	{Name: "workflow", Description: "Only this workflow's executions."},
	{Name: "status", Description: "Pending, Running, Completed, Failed, Cancelled, Terminated, TimedOut or ContinuedAsNew."},
	{Name: "key_prefix", Description: "Executions whose start's idempotency key begins with this."},
	{Name: "workflow_id_prefix", Description: "Executions whose workflow_id begins with this."},
	{Name: "created_after", Description: "Started at or after this time (RFC 3339).", Type: "date-time"},
	{Name: "created_before", Description: "Started before this time (RFC 3339).", Type: "date-time"},
}

// searchFilterDescription says the search attribute filters a list and
// a count take, which no fixed parameter describes.
const searchFilterDescription = "Search attributes filter too (docs/search-attributes.md): attr.NAME=VALUE keeps executions whose attribute NAME has " +
	"that value; attr.NAME.gt, .gte, .lt and .lte bound an int, double or time attribute. NAME is one a workflow declares " +
	"(workflows.<name>.search_attributes); with workflow set, as that workflow declares it. 400 invalid_search_attribute for an undeclared " +
	"name, a value not of its type, or a range on a keyword or bool."

func errs(m map[int]Answer, statuses ...int) map[int]Answer {
	why := map[int]string{
		http.StatusBadRequest:            "The request is malformed: `error` names what (invalid_json, unknown_field, unknown_parameter, invalid_idempotency_key, …) and `field` where (a body member, or a query parameter).",
		http.StatusUnauthorized:          "No token, or one the API does not know (only when the API has tokens). WWW-Authenticate: Bearer.",
		http.StatusForbidden:             "The token lacks the route's scope, or is limited to other workflows (forbidden); or a browser sent this request from another site with a body that is not JSON (cross_site_request).",
		http.StatusNotFound:              "No such execution, command or source (or one the token may not see).",
		http.StatusConflict:              "The request conflicts with an execution's state (workflow_id_conflict, execution_terminal).",
		http.StatusRequestTimeout:        "The body did not arrive within its deadline, 2 s and 1 s for each 256 KiB it announces (body_timeout); the connection is closed and nothing was published.",
		http.StatusRequestEntityTooLarge: "The body is larger than max_body_bytes (payload_too_large, with `limit`).",
		http.StatusUnsupportedMediaType:  "The body's Content-Type is not JSON.",
		http.StatusUnprocessableEntity:   "The request is well formed but refused: input_invalid (with `violations`), callback_rejected, idempotency_key_reused, payload_invalid.",
		http.StatusInternalServerError:   "An unexpected failure; `request_id` names it in the server's log.",
		http.StatusServiceUnavailable:    "Try again after Retry-After: JetStream or PostgreSQL unavailable, too many requests at once, or the workflow's admission gate closed.",
	}
	for _, s := range statuses {
		m[s] = Answer{Description: why[s], Body: errBody}
	}
	return m
}

// guarded are the errors of a route behind a token.
var guarded = []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusInternalServerError, http.StatusServiceUnavailable}

// replacing puts answers of its own in m, over the usual ones errs gave.
func replacing(m map[int]Answer, own ...map[int]Answer) map[int]Answer {
	for _, o := range own {
		maps.Copy(m, o)
	}
	return m
}

func with(base []int, more ...int) []int { return append(append([]int(nil), base...), more...) }

// startErrors are a start's own answers to a bad task queue and to an
// unknown workflow, over the usual 400 and 404.
var startErrors = map[int]Answer{
	http.StatusBadRequest: {"The request is malformed: `error` names what (invalid_json, unknown_field, unknown_parameter, invalid_idempotency_key, " +
		"invalid_workflow_id, invalid_task_queue, …) and `field` where (a body member, or a query parameter).", errBody},
	http.StatusNotFound: {"unknown_workflow: no live worker serves the workflow on the start's task queue and the configuration does not declare it there; " +
		"the message names the workflow and the queue.", errBody},
}

// scheduleErrors are the answers of a route naming a schedule to a bad
// or unknown id, over the usual 400 and 404.
var scheduleErrors = map[int]Answer{
	http.StatusBadRequest: {"The request is malformed: `error` names what (invalid_schedule_id: the id is not 1 to 128 letters, digits, '_', '-' or '.'; " +
		"invalid_json, unknown_field, unknown_parameter, …) and `field` where.", errBody},
	http.StatusNotFound: {"schedule_not_found: no such schedule (or one whose workflow the token may not see).", errBody},
}

// commandRejected is the answer to a change of a schedule whose command
// the scheduler set aside.
var commandRejected = Answer{"command_rejected: the scheduler could not apply the command and set it aside as dead.", errBody}

// scheduleAction are the answers of an action on a schedule (pause,
// unpause, trigger, backfill): done says what 200 means.
func scheduleAction(done string) map[int]Answer {
	return replacing(errs(map[int]Answer{
		200: {done, api.ScheduleActionResponse{}},
		202: {"Durable, outcome not known yet: poll GET /api/harvest/commands/{command_id}.", api.AcceptedResponse{}},
	}, with(guarded, 400, 404, 413, 422)...), scheduleErrors, map[int]Answer{http.StatusUnprocessableEntity: commandRejected})
}

var idempotencyKey = Param{Name: "Idempotency-Key", Description: "Makes the request idempotent: every retry with the same key converges on the same execution (or delivers the signal once)."}

// signalDescription, signalKeyParam and signalAnswers describe the signal
// route, under its path and its deprecated one.
const signalDescription = "The body is the signal's payload, any JSON (empty is null). With an Idempotency-Key the signal is delivered once. " +
	"The path names the execution by its execution id, not its workflow_id: a segment that is no UUID but may be a workflow_id " +
	"is 404 execution_not_found, whose message says how to reach the workflow_id's execution (GET /api/harvest/executions?workflow_id_prefix=, " +
	"or POST /api/harvest/workflows/{name}/signal-with-start)."

var signalKeyParam = Param{Name: "idempotency_key", Description: "The key, for senders that cannot set headers; the Idempotency-Key header wins."}

func signalAnswers() map[int]Answer {
	return replacing(errs(map[int]Answer{
		202: {"The signal was delivered (signal_delivered), deduplicated (signal_delivered false), or is durable and not applied yet (command_id).", api.SignalResponse{}},
	}, with(guarded, 400, 404, 409, 413, 422)...), map[int]Answer{
		http.StatusBadRequest: {"The request is malformed: `error` names what (invalid_idempotency_key; invalid_execution_id: a UUID in another " +
			"spelling than its 36 characters, or a segment that can be neither an execution id nor a workflow_id; invalid_signal_name; " +
			"invalid_json, unknown_parameter, …) and `field` where.", errBody},
		http.StatusNotFound: {"execution_not_found: no such execution (or one the token may not see); its message says how to signal " +
			"by workflow_id when the path's execution_id may be one.", errBody},
	})
}

// Routes are the API's routes, as ingest serves them.
var Routes = []Route{
	{
		Method: "POST", Path: "/api/harvest/workflows/{name}/start", ID: "startWorkflow", Tag: "workflows", Scope: "start",
		Summary: "Start a workflow execution",
		Description: "With an Idempotency-Key, every retry converges on one execution: 201 when this request created it, 200 when it found it. " +
			"A workflow under a start policy (throttle, debounce, batch; configured, or the request's start_policy) may defer the start: " +
			"202 with status deferred and no execution_id. Such a start takes no Idempotency-Key (400 idempotency_key_not_allowed), " +
			"unless it replays a keyed start committed before. " +
			"A concurrency start policy defers nothing: a start over its limit creates its execution at once, status Pending " +
			"(waiting_for concurrency, with its concurrency_key), which begins in arrival order as running ones of its key close; " +
			"such a start may carry an Idempotency-Key, and an input with no string, number or boolean at the policy's key is " +
			"422 concurrency_key_missing. " +
			"task_queue chooses the task queue the execution's tasks go to (absent: the workflow's configured workflows.<name>.task_queue, else default); " +
			"a name that is not 1 to 128 bytes of letters, digits, '_' and '-' is 400 invalid_task_queue, and a start on a queue no live worker serves " +
			"the workflow on, where the configuration does not declare it, is 404 unknown_workflow naming the queue. " +
			"run_timeout and execution_timeout bound the run and its chain of continued runs (absent: the workflow's configured ones): " +
			"past one the execution closes TimedOut; zero, negative, over ten years, or a run timeout longer than the execution timeout is 400 invalid_timeout. " +
			"priority (1 to 5, default 3) orders the execution's tasks among the others of its task queue, higher taken first; another is 400 invalid_priority.",
		Headers: []Param{idempotencyKey}, Body: api.StartRequest{},
		Responses: replacing(errs(map[int]Answer{
			200: {"An execution with this key (or workflow_id, by reuse policy) already exists: its id.", api.StartResponse{}},
			201: {"The execution was created.", api.StartResponse{}},
			202: {"The start is durable but its outcome is not known yet (status accepted), or its start policy deferred it (status deferred): " +
				"poll GET /api/harvest/commands/{command_id}, which gives the execution it became part of once it begins.", api.AcceptedResponse{}},
		}, with(guarded, 409, 413, 422)...), startErrors, map[int]Answer{
			http.StatusUnprocessableEntity: {"The request is well formed but refused: input_invalid (with `violations`), callback_rejected, " +
				"idempotency_key_reused, payload_invalid, or concurrency_key_missing (with `field` input: the input has nothing usable " +
				"at the concurrency start policy's key).", errBody},
		}),
	},
	{
		Method: "POST", Path: "/api/harvest/workflows/{name}/signal-with-start", ID: "signalWithStart", Tag: "workflows", Scope: "start",
		Summary: "Signal the execution of a workflow_id, starting it if none runs",
		Description: "task_queue chooses the task queue of the execution it starts, as a start's does (400 invalid_task_queue, " +
			"404 unknown_workflow naming the queue).",
		Headers: []Param{idempotencyKey}, Body: api.SignalWithStartRequest{}, BodyRequired: true,
		Responses: replacing(errs(map[int]Answer{
			200: {"The running execution took the signal.", api.SignalWithStartResponse{}},
			201: {"The execution was started with the signal.", api.SignalWithStartResponse{}},
			202: {"Durable, outcome not known yet.", api.SignalResponse{}},
		}, with(guarded, 409, 413, 422)...), startErrors),
	},
	{
		Method: "POST", Path: "/api/harvest/workflows/{execution_id}/signal/{signal_name}", ID: "signalExecution", Tag: "executions", Scope: "signal",
		Summary: "Send a signal to an execution (deprecated path)",
		Description: "Deprecated: use POST /api/harvest/executions/{execution_id}/signals/{name}, which serves the same request " +
			"with the same answers; this path is kept for one release. " + signalDescription,
		Deprecated: true,
		Headers:    []Param{idempotencyKey}, Body: json.RawMessage(nil),
		Query:     []Param{signalKeyParam},
		Responses: signalAnswers(),
	},
	{
		Method: "GET", Path: "/api/harvest/workflows", ID: "listWorkflows", Tag: "workflows", Scope: "read",
		Summary:   "List workflows with their executions by status, input schemas, admission gates and live workers, including those declared or served that never ran",
		Responses: errs(map[int]Answer{200: {"The workflows, by name.", api.ListWorkflowsResponse{}}}, guarded...),
	},
	{
		Method: "GET", Path: "/api/harvest/workflows/{name}/versions", ID: "workflowVersions", Tag: "workflows", Scope: "read",
		Summary: "Tell which code a workflow's open executions run: by the build that ran their last workflow task, and by the version each recorded of each change (harvest.GetVersion)",
		Description: "A build, or a GetVersion branch, can be retired once no open execution has it. " +
			"An execution that recorded no version of a change counts as unrecorded: it went past the change before it was deployed, or has not reached it.",
		Responses: errs(map[int]Answer{200: {"The open executions, by build and by version.", api.WorkflowVersionsResponse{}}}, with(guarded, 400)...),
	},
	{
		Method: "GET", Path: "/api/harvest/workflows/{name}/concurrency", ID: "workflowConcurrency", Tag: "workflows", Scope: "read",
		Summary: "Tell how many executions of a workflow run, and wait Pending, under one value of its concurrency start policy's key, and the policy's limit",
		Description: "Pending executions begin in the order their starts came, as running ones of the key close. " +
			"limit is the policy's limit as last recorded for the key; a key no start used answers 0 of everything.",
		Query: []Param{{Name: "key", Description: "The value of the policy's key (the input's value at its JSON Pointer, as text); " +
			"absent or empty: the policy without a key, which counts the whole workflow."}},
		Responses: errs(map[int]Answer{
			200: {"The key's running and pending executions, and its limit.", api.ConcurrencyResponse{}},
			400: {"invalid_workflow_name; invalid_start_policy with `field` key (not UTF-8 text, or too long); or unknown_parameter.", errBody},
		}, guarded...),
	},
	{
		Method: "GET", Path: "/api/harvest/webhooks", ID: "listWebhooks", Tag: "webhooks", Scope: "read",
		Summary: "List the webhook sources and NATS subject bindings, with what this ingest process counted of their deliveries",
		Description: "The counts are the answering process's, since counted_since (when it started): for a fleet of ingest processes, " +
			"sum harvest_ingest_webhooks_total, harvest_ingest_webhooks_refused_total and harvest_binding_messages_total in Prometheus. " +
			"A token limited to some workflows sees the rules that route to them.",
		Responses: errs(map[int]Answer{200: {"The sources and bindings, as configured.", api.ListWebhooksResponse{}}}, guarded...),
	},
	{
		Method: "GET", Path: "/api/harvest/workers", ID: "listWorkers", Tag: "workers", Scope: "read",
		Summary: "List the live workers: who each is, its task queue, what it registered and how busy it is",
		Description: "Read from the workers bucket, so a worker is listed from its first registration until it stops, " +
			"or until its registration lapses (worker_ttl, 30 s) after it vanished. By task queue, host and id. " +
			"pid, build, started_at and slots are absent for a worker of a version before workers said who they are. " +
			"A token limited to some workflows sees every worker, with only those workflows.",
		Responses: errs(map[int]Answer{200: {"The live workers.", api.ListWorkersResponse{}}}, guarded...),
	},
	{
		Method: "GET", Path: "/api/harvest/task-queues/{name}", ID: "describeTaskQueue", Tag: "workers", Scope: "read",
		Summary: "Tell a task queue's backlog and live workers, by workflow and activity",
		Description: "Each workflow and activity that has tasks in the task stream or a live worker registered on the queue, " +
			"with its backlog (tasks waiting for a worker or being run) and the ids of the live workers that serve it: " +
			"a backlog with no workers is work that waits for a worker. unrouted_backlog counts the tasks an older scheduler " +
			"wrote before tasks were routed by name. A token limited to some workflows sees only those workflows.",
		Responses: errs(map[int]Answer{200: {"The queue's names, with their backlogs and workers.", api.TaskQueueResponse{}}}, with(guarded, 400)...),
	},
	{
		Method: "GET", Path: "/api/harvest/executions", ID: "listExecutions", Tag: "executions", Scope: "read",
		Summary:     "List executions, newest first",
		Description: searchFilterDescription,
		Query: append(slices.Clip(listFilterParams), Param{Name: "limit", Description: "1 to 500, default 50.", Type: "integer"},
			Param{Name: "cursor", Description: "The next_cursor of the previous page."}),
		Responses: errs(map[int]Answer{200: {"A page of executions; next_cursor when there are more.", api.ListExecutionsResponse{}}}, with(guarded, 400)...),
	},
	{
		Method: "GET", Path: "/api/harvest/executions/count", ID: "countExecutions", Tag: "executions", Scope: "read",
		Summary:     "Count the executions a list's filters match, across the stores",
		Description: searchFilterDescription,
		Query:       listFilterParams,
		Responses:   errs(map[int]Answer{200: {"How many.", api.CountExecutionsResponse{}}}, with(guarded, 400)...),
	},
	{
		Method: "POST", Path: "/api/harvest/executions/{execution_id}/signals/{name}", ID: "sendSignal", Tag: "executions", Scope: "signal",
		Summary:     "Send a signal to an execution",
		Description: signalDescription,
		Headers:     []Param{idempotencyKey}, Body: json.RawMessage(nil),
		Query:     []Param{signalKeyParam},
		Responses: signalAnswers(),
	},
	{
		Method: "GET", Path: "/api/harvest/executions/{execution_id}", ID: "describeExecution", Tag: "executions", Scope: "read",
		Summary: "Describe an execution",
		Description: "Besides its row: its start key's claim (idempotency_claim, while it is kept) with the duplicates it absorbed by layer, " +
			"its keyed signals with theirs (signal_keys), and its completion callback's delivery (completion_callback).",
		Responses: errs(map[int]Answer{200: {"The execution.", api.Execution{}}}, with(guarded, 400, 404)...),
	},
	{
		Method: "GET", Path: "/api/harvest/executions/{execution_id}/history", ID: "executionHistory", Tag: "executions", Scope: "read",
		Summary:   "Read an execution's history, oldest event first",
		Responses: errs(map[int]Answer{200: {"The events.", api.HistoryResponse{}}}, with(guarded, 400, 404)...),
	},
	{
		Method: "POST", Path: "/api/harvest/executions/{execution_id}/updates/{name}", ID: "updateExecution", Tag: "executions", Scope: "signal",
		Summary: "Ask a running execution for an update, which its workflow answers",
		Description: "The body is the update's arguments, any JSON up to 64 KiB (empty is null). The workflow's handler for name " +
			"(harvest.SetUpdateHandler) answers it; its validator may refuse it (422 update_rejected), which writes nothing to the history. " +
			"With an Idempotency-Key the update is asked once per chain of continued runs: a request that repeats the key is answered " +
			"with the first one's update (deduplicated). An update to a run that continued as new goes to the chain's newest run. " +
			"The request waits up to 20 s for the answer (wait=completed) or for the workflow to accept the update (wait=accepted); " +
			"read it later with GET .../updates/{update_id}.",
		Headers: []Param{idempotencyKey}, Body: json.RawMessage(nil),
		Query: []Param{{Name: "wait", Description: "completed (the default): answer once the handler returned; accepted: once the workflow accepted it."}},
		Responses: errs(map[int]Answer{
			200: {"The update's answer: completed with the handler's result, or failed with its error.", api.Update{}},
			202: {"Not answered yet (accepted, or requested): read it with GET .../updates/{update_id}.", api.Update{}},
		}, with(guarded, 400, 404, 409, 413, 422, 429)...),
	},
	{
		Method: "GET", Path: "/api/harvest/executions/{execution_id}/updates/{update_id}", ID: "getUpdate", Tag: "executions", Scope: "read",
		Summary:     "Read an update of an execution",
		Description: "With wait (a duration up to 30s), the answer comes once the update has its answer, or when the wait ends, as it then stands.",
		Query:       []Param{{Name: "wait", Description: "How long to wait for the update's answer: 0s to 30s."}},
		Responses:   errs(map[int]Answer{200: {"The update.", api.Update{}}}, with(guarded, 400, 404)...),
	},
	{
		Method: "GET", Path: "/api/harvest/executions/{execution_id}/state", ID: "listExecutionStates", Tag: "executions", Scope: "read",
		Summary: "Read every query state of an execution, by name",
		Description: "The states its workflow code set (harvest.SetQueryState), each with the latest value and the seq of the workflow task's " +
			"WorkflowTaskCompleted it reflects. Read from PostgreSQL: no worker needs to run, and a closed execution keeps its states until it is pruned.",
		Responses: errs(map[int]Answer{200: {"The states, by name; none is an empty list.", api.ListStatesResponse{}}}, with(guarded, 400, 404)...),
	},
	{
		Method: "GET", Path: "/api/harvest/executions/{execution_id}/children", ID: "listExecutionChildren", Tag: "executions", Scope: "read",
		Summary: "List the child workflows an execution started",
		Description: "The children its workflow code started (harvest.ExecuteChildWorkflow), each with the execution its start became and its " +
			"status as last reported to the parent: Initiated, StartFailed, Running, then how its chain closed. A run that continued as new " +
			"lists the children of its chain still open. Each child's execution names its parent (parent_execution_id).",
		Responses: errs(map[int]Answer{200: {"The children; none is an empty list.", api.ListChildrenResponse{}}}, with(guarded, 400, 404)...),
	},
	{
		Method: "GET", Path: "/api/harvest/executions/{execution_id}/state/{name}", ID: "getExecutionState", Tag: "executions", Scope: "read",
		Summary: "Read a query state of an execution, or wait for a newer value",
		Description: "The state's latest value, as the last workflow task that changed it left it (harvest.SetQueryState), and seq, the history event " +
			"(that task's WorkflowTaskCompleted) it reflects. Read from PostgreSQL: no worker needs to run, and it works after the execution closed. " +
			"With after_seq (0 when only wait is given) it answers at once when the value's seq is greater, and otherwise waits up to wait for one: " +
			"then it answers the value it has (compare seq), or 404 state_not_found for a state never set. A closed execution answers at once. " +
			"A run continued as new keeps its own states: describe's continued_as names the next run.",
		Query: []Param{
			{Name: "after_seq", Description: "The seq of the value you have: answer with a newer one, waiting up to wait for it.", Type: "integer"},
			{Name: "wait", Description: "How long to wait for a newer value, a Go duration from 0s to 60s (such as 30s); default 0s."},
		},
		Responses: replacing(errs(map[int]Answer{200: {"The state.", api.State{}}}, with(guarded, 400, 404)...), map[int]Answer{
			http.StatusBadRequest: {"The request is malformed: invalid_execution_id, invalid_state_name, invalid_after_seq, invalid_wait " +
				"or unknown_parameter, with `field`.", errBody},
			http.StatusNotFound: {"execution_not_found: no such execution (or one the token may not see); " +
				"state_not_found: its workflow code never set the state.", errBody},
		}),
	},
	{
		Method: "POST", Path: "/api/harvest/executions/{execution_id}/cancel", ID: "cancelExecution", Tag: "executions", Scope: "cancel",
		Summary: "Ask a running execution to cancel", Body: api.CancelRequest{},
		Description: "Its workflow code is told at its next workflow task (a WorkflowCancelRequested event): the activities and timers it waits for are given up, " +
			"it may clean up in a disconnected context, and its return closes the execution as Cancelled (docs/cancellation.md). " +
			"An execution whose code never ran closes at once. cancel_grace bounds how long the code may take: the execution is terminated then. " +
			"400 invalid_cancel_grace for a cancel_grace that is not a positive duration of at most ten years.",
		Responses: errs(map[int]Answer{
			200: {"The request was recorded (status Running, cancel_requested), the execution closed at once (its code never ran), or it had already closed: its status.", api.CancelResponse{}},
			202: {"Durable, outcome not known yet.", api.AcceptedResponse{}},
		}, with(guarded, 400, 404, 409, 413)...),
	},
	{
		Method: "POST", Path: "/api/harvest/executions/{execution_id}/terminate", ID: "terminateExecution", Tag: "executions", Scope: "cancel",
		Summary:     "Terminate a running execution",
		Description: "It closes as Terminated at once: its workflow code runs no more, its pending activities and timers are abandoned, its running activities' contexts cancelled.",
		Body:        api.TerminateRequest{},
		Responses: errs(map[int]Answer{
			200: {"The termination was applied (or the execution had already closed: its status).", api.TerminateResponse{}},
			202: {"Durable, outcome not known yet.", api.AcceptedResponse{}},
		}, with(guarded, 400, 404, 409, 413)...),
	},
	{
		Method: "POST", Path: "/api/harvest/executions/{execution_id}/reset", ID: "resetExecution", Tag: "executions", Scope: "cancel",
		Summary: "Reset an execution to one of its workflow tasks: a new run of its workflow_id starts from there",
		Description: "The events that task's code saw are kept; the task and what followed are run again by the current code; the signals received after it " +
			"are received again with their keys (reapply_signals, default true); activities the run scheduled after it keep their idempotency keys where " +
			"the new run schedules the same activity at the same position. A running execution closes Terminated (reset_to); the new run names it (reset_from). " +
			"to: {\"seq\": N} (a WorkflowTaskCompleted), {\"activity\": NAME, \"occurrence\": \"first\"|\"last\"|\"last_failed\"}, \"first_task\" or \"last_task\". " +
			"?dry_run=true answers the plan and changes nothing. 422 invalid_reset_point, with nearest_points, for a point no reset can go to; " +
			"409 execution_not_latest for a run that continued as new or was reset to another point already (docs/reset.md).",
		Query: []Param{{Name: "dry_run", Description: "true: answer the plan (a ResetPlan) and change nothing.", Type: "boolean"}},
		Body:  api.ResetRequest{},
		Responses: errs(map[int]Answer{
			200: {"The plan (dry_run=true); nothing changed.", api.ResetPlan{}},
			201: {"The new run; deduplicated when the same reset (the same execution and point) was applied before, naming the run it made then.", api.ResetResponse{}},
			202: {"Durable, outcome not known yet.", api.AcceptedResponse{}},
		}, with(guarded, 400, 404, 409, 413, 422)...),
	},
	{
		Method: "POST", Path: "/api/harvest/batches", ID: "createBatch", Tag: "batches", Scope: "cancel",
		Summary: "Start a batch operation: cancel, terminate, signal or reset every execution a filter matches, at a bounded rate",
		Description: "A durable job the schedulers run (docs/batches.md): each store's part sends the operation to that store's matching executions, " +
			"created before the batch, newest first, at most rate a second, each once whatever crashes, and counts how each went. " +
			"The filter's conditions all hold; one with none needs \"all\": true (400 invalid_filter). " +
			"A signal batch's signal goes under a key of the batch, so each execution gets it once; a reset batch resolves reset.to against each history. " +
			"With an Idempotency-Key the same key is the same batch: a retry answers it (200) as it stands.",
		Headers: []Param{idempotencyKey}, Body: api.BatchRequest{}, BodyRequired: true,
		Responses: replacing(errs(map[int]Answer{
			200: {"The batch of this Idempotency-Key, created before.", api.BatchOperation{}},
			201: {"The batch, running.", api.BatchOperation{}},
		}, with(guarded, 400, 413)...), map[int]Answer{
			http.StatusBadRequest: {"invalid_filter or invalid_batch with `field`, invalid_json, unknown_field, invalid_reason, invalid_idempotency_key.", errBody},
		}),
	},
	{
		Method: "GET", Path: "/api/harvest/batches", ID: "listBatches", Tag: "batches", Scope: "read",
		Summary:     "List the newest batch operations",
		Description: "Each as GET /api/harvest/batches/{batch_id} answers it, without its errors.",
		Query:       []Param{{Name: "limit", Description: "1 to 500, default 50.", Type: "integer"}},
		Responses:   errs(map[int]Answer{200: {"The batches, newest first.", api.ListBatchesResponse{}}}, with(guarded, 400)...),
	},
	{
		Method: "GET", Path: "/api/harvest/batches/{batch_id}", ID: "getBatch", Tag: "batches", Scope: "read",
		Summary:     "Read a batch operation's progress",
		Description: "Its state (running, completed, cancelled), the executions it matched so far, those its operation was applied to and refused on, with the first 100 refusals.",
		Responses: replacing(errs(map[int]Answer{200: {"The batch.", api.BatchOperation{}}}, with(guarded, 404)...), map[int]Answer{
			http.StatusNotFound: {"batch_not_found.", errBody},
		}),
	},
	{
		Method: "POST", Path: "/api/harvest/batches/{batch_id}/cancel", ID: "cancelBatch", Tag: "batches", Scope: "cancel",
		Summary:     "Cancel a batch operation: it sends its operation to no more executions",
		Description: "What it sent already is applied and counted; cancelling a batch that finished changes nothing.",
		Responses: replacing(errs(map[int]Answer{200: {"The batch, cancelled (or as it finished).", api.BatchOperation{}}}, with(guarded, 404)...), map[int]Answer{
			http.StatusNotFound: {"batch_not_found.", errBody},
		}),
	},
	{
		Method: "GET", Path: "/api/harvest/commands/{command_id}", ID: "getCommand", Tag: "commands", Scope: "read",
		Summary: "Read what became of a command answered 202",
		Description: "While the command waits, its status is accepted (deferred: a start its start policy holds back); " +
			"once applied (or rejected) the answer its request would have had.",
		Responses: errs(map[int]Answer{200: {"The command's state.", api.CommandResponse{}}}, with(guarded, 404)...),
	},
	{
		Method: "GET", Path: "/api/harvest/commands/dead", ID: "listDeadCommands", Tag: "commands", Scope: "read",
		Summary: "List commands the scheduler set aside as unappliable, newest first",
		Query: []Param{
			{Name: "shard", Description: "Only this shard's.", Type: "integer"},
			{Name: "before", Description: "Older than this id: the next page.", Type: "integer"},
			{Name: "limit", Description: "1 to 500, default 50.", Type: "integer"},
		},
		Responses: errs(map[int]Answer{200: {"The dead commands.", api.ListDeadCommandsResponse{}}}, with(guarded, 400)...),
	},
	{
		Method: "GET", Path: "/api/harvest/commands/dead/{id}", ID: "getDeadCommand", Tag: "commands", Scope: "read",
		Summary:   "Read a dead command with its payload",
		Responses: errs(map[int]Answer{200: {"The dead command.", api.DeadCommand{}}}, with(guarded, 400, 404)...),
	},
	{
		Method: "GET", Path: "/api/harvest/retention", ID: "getRetention", Tag: "retention", Scope: "read",
		Summary: "Tell what is past retention and not pruned yet, by workflow",
		Description: "The closed executions whose prune time (their close plus their workflow's retention) is before as_of, " +
			"with the oldest prune time, and the closed executions without a prune time yet (closed before retention existed), by workflow. " +
			"A token limited to some workflows sees theirs.",
		Query: []Param{{Name: "as_of", Description: "Tell what is past retention at this time (RFC 3339), default now: " +
			"the as_of of a prune's answer follows what it asked to prune while more executions pass their retention.", Type: "date-time"}},
		Responses: errs(map[int]Answer{200: {"What the schedulers have yet to prune.", api.RetentionResponse{}}}, with(guarded, 400)...),
	},
	{
		Method: "POST", Path: "/api/harvest/retention/prune", ID: "pruneNow", Tag: "retention", Scope: "admin",
		Summary: "Ask every scheduler to prune the executions past their retention now",
		Description: "Each scheduler prunes the shards it holds at once, rather than at its next interval, in its usual batches; " +
			"the answer does not wait for it. Follow it with GET /api/harvest/retention?as_of=<the answer's as_of> until nothing is left. " +
			"A token limited to some workflows may not: a prune acts on every workflow.",
		Responses: replacing(errs(map[int]Answer{
			202: {"The schedulers were asked; what was past retention when they were.", api.RetentionResponse{}},
		}, with(guarded, 400)...), map[int]Answer{
			503: {"Try again after Retry-After: PostgreSQL or NATS unavailable, too many requests at once, or no scheduler running to prune.", errBody},
		}),
	},
	{
		Method: "GET", Path: "/api/harvest/schedules", ID: "listSchedules", Tag: "schedules", Scope: "read",
		Summary: "List the schedules, by id",
		Description: "A page of the schedules (docs/schedules.md), each as GET /api/harvest/schedules/{schedule_id} answers it, without last_fire. " +
			"A token limited to some workflows sees the schedules of those workflows.",
		Query: []Param{
			{Name: "limit", Description: "1 to 500, default 100.", Type: "integer"},
			{Name: "cursor", Description: "The next_cursor of the previous page."},
		},
		Responses: replacing(errs(map[int]Answer{200: {"A page of schedules; next_cursor when there are more.", api.ScheduleList{}}}, with(guarded, 400)...), map[int]Answer{
			http.StatusBadRequest: {"invalid_limit, invalid_cursor or unknown_parameter, with `field`.", errBody},
		}),
	},
	{
		Method: "PUT", Path: "/api/harvest/schedules/{schedule_id}", ID: "putSchedule", Tag: "schedules", Scope: "start",
		Summary: "Create a schedule, or replace its definition",
		Description: "A schedule starts its workflow at every time its spec gives (cron expressions, a fixed interval, or both, in a time zone), " +
			"each fire a start keyed by the schedule and its nominal time (idempotency key sched:<id>:<nominal time>), under its overlap policy. " +
			"A replaced schedule keeps where its firing stands: the new spec's times after it fire, and what it started still counts for its overlap policy. " +
			"task_queue, overlap, catchup_window and workflow_id_template are filled in with their defaults in the answer. " +
			"The workflow must be one a live worker serves, or the configuration declares, on the task queue (404 unknown_workflow).",
		Body: api.ScheduleRequest{}, BodyRequired: true,
		Responses: replacing(errs(map[int]Answer{
			200: {"The schedule existed: its definition was replaced (or was the same).", api.Schedule{}},
			201: {"The schedule was created.", api.Schedule{}},
			202: {"Durable, outcome not known yet: poll GET /api/harvest/commands/{command_id}, then read the schedule.", api.AcceptedResponse{}},
		}, with(guarded, 400, 404, 413, 422)...), map[int]Answer{
			http.StatusBadRequest: {"The definition is refused, with `field`: invalid_schedule_id (the path's id is not 1 to 128 letters, digits, '_', '-' or '.'), " +
				"invalid_schedule_spec (a cron field that is none, every below 1s, jitter longer than the interval, an overlap policy, catch-up window or " +
				"workflow_id template that is none; field such as spec.cron[0]), invalid_timezone (not an IANA time zone name), invalid_workflow_name, " +
				"invalid_task_queue; or the body is malformed (invalid_json, unknown_field, payload_unstorable).", errBody},
			http.StatusNotFound:            {"unknown_workflow: no live worker serves the workflow on the task queue and the configuration does not declare it there.", errBody},
			http.StatusUnprocessableEntity: commandRejected,
		}),
	},
	{
		Method: "GET", Path: "/api/harvest/schedules/{schedule_id}", ID: "getSchedule", Tag: "schedules", Scope: "read",
		Summary: "Read a schedule: its definition, whether it is paused, its next fires, running and buffered fires, and its latest fire",
		Description: "next_fires are the next nominal times (up to five, none once past the spec's end_at), each with when it is due, jitter added. " +
			"running are the fires whose executions have not closed; buffered the nominal times waiting for them.",
		Responses: replacing(errs(map[int]Answer{200: {"The schedule.", api.Schedule{}}}, with(guarded, 400, 404)...), scheduleErrors),
	},
	{
		Method: "DELETE", Path: "/api/harvest/schedules/{schedule_id}", ID: "deleteSchedule", Tag: "schedules", Scope: "start",
		Summary:     "Delete a schedule and its ledger",
		Description: "The executions it started run on.",
		Responses: replacing(errs(map[int]Answer{
			200: {"Deleted (action deleted).", api.ScheduleActionResponse{}},
			202: {"Durable, outcome not known yet: poll GET /api/harvest/commands/{command_id}.", api.AcceptedResponse{}},
		}, with(guarded, 400, 404, 422)...), scheduleErrors, map[int]Answer{http.StatusUnprocessableEntity: commandRejected}),
	},
	{
		Method: "GET", Path: "/api/harvest/schedules/{schedule_id}/fires", ID: "listScheduleFires", Tag: "schedules", Scope: "read",
		Summary: "Read a schedule's ledger of fires, newest nominal time first",
		Description: "Each fire says what made it (spec, trigger, backfill) and what it did: starting, started, deduplicated, skipped_overlap, buffered, " +
			"missed_catchup, paused or start_failed (with error and message), the execution it started and, once that closed, how.",
		Query: []Param{
			{Name: "limit", Description: "1 to 500, default 100.", Type: "integer"},
			{Name: "cursor", Description: "The next_cursor of the previous page."},
		},
		Responses: replacing(errs(map[int]Answer{200: {"A page of fires; next_cursor when there are more.", api.ScheduleFireList{}}}, with(guarded, 400, 404)...), map[int]Answer{
			http.StatusBadRequest: {"invalid_schedule_id, invalid_limit, invalid_cursor or unknown_parameter, with `field`.", errBody},
			http.StatusNotFound:   scheduleErrors[http.StatusNotFound],
		}),
	},
	{
		Method: "POST", Path: "/api/harvest/schedules/{schedule_id}/pause", ID: "pauseSchedule", Tag: "schedules", Scope: "start",
		Summary:     "Pause a schedule: the times that pass are recorded as paused, and start nothing",
		Description: "The body is optional: a note, up to 1024 bytes, shown with the schedule (400 invalid_schedule_spec, field note, for a longer one).",
		Body:        api.SchedulePauseRequest{},
		Responses:   scheduleAction("Paused (action paused)."),
	},
	{
		Method: "POST", Path: "/api/harvest/schedules/{schedule_id}/unpause", ID: "unpauseSchedule", Tag: "schedules", Scope: "start",
		Summary:     "Unpause a schedule: its next times fire, and the fires it buffered start",
		Description: "The body is optional: a note shown with the schedule; none clears the pause's.",
		Body:        api.SchedulePauseRequest{},
		Responses:   scheduleAction("Unpaused (action unpaused)."),
	},
	{
		Method: "POST", Path: "/api/harvest/schedules/{schedule_id}/trigger", ID: "triggerSchedule", Tag: "schedules", Scope: "start",
		Summary:   "Fire a schedule now, under its overlap policy, paused or not",
		Responses: scheduleAction("Fired (action triggered); fires holds the nominal time, now."),
	},
	{
		Method: "POST", Path: "/api/harvest/schedules/{schedule_id}/backfill", ID: "backfillSchedule", Tag: "schedules", Scope: "start",
		Summary: "Fire every nominal time of a schedule's spec from start to end, now",
		Description: "start and end are both included; the range may hold at most 1000 nominal times. overlap is the policy of these fires (absent: the schedule's). " +
			"A time that fired before starts nothing new: its fire is recorded deduplicated, with the execution it started. " +
			"400 invalid_backfill for a start or end that is missing, an end before the start, an overlap policy that is none, or a range of more than 1000 times.",
		Body: api.ScheduleBackfillRequest{}, BodyRequired: true,
		Responses: replacing(scheduleAction("Fired (action backfilled); fires holds the nominal times."), map[int]Answer{
			http.StatusBadRequest: {"invalid_backfill, with `field` (start, end or overlap); invalid_schedule_id; or the body is malformed " +
				"(invalid_json, unknown_field).", errBody},
		}),
	},
	{
		Method: "GET", Path: "/api/harvest/admission", ID: "listAdmission", Tag: "admission", Scope: "read",
		Summary:   "List the closed admission gates",
		Responses: errs(map[int]Answer{200: {"The closed gates.", api.ListAdmissionResponse{}}}, guarded...),
	},
	{
		Method: "POST", Path: "/api/harvest/admission/{workflow}/close", ID: "closeAdmission", Tag: "admission", Scope: "admin",
		Summary: "Close a workflow's admission gate: its starts are refused with 503 admission_blocked",
		Body:    api.CloseAdmissionRequest{}, BodyRequired: true,
		Responses: errs(map[int]Answer{200: {"The gate, closed.", api.AdmissionGate{}}}, with(guarded, 400, 413)...),
	},
	{
		Method: "POST", Path: "/api/harvest/admission/{workflow}/open", ID: "openAdmission", Tag: "admission", Scope: "admin",
		Summary:   "Open a workflow's admission gate",
		Responses: errs(map[int]Answer{200: {"The gate, open.", api.AdmissionGate{}}}, with(guarded, 400)...),
	},
	{
		Method: "POST", Path: "/hooks/{source}", ID: "deliverWebhook", Tag: "webhooks",
		Summary:     "Deliver a webhook event from a configured source",
		Description: "Authenticated by the source's signature (Stripe, GitHub or HMAC), never by a token. The body is the provider's event.",
		Body:        json.RawMessage(nil), BodyRequired: true,
		Responses: errs(map[int]Answer{
			200: {"A duplicate of an event already accepted.", api.HookResponse{}},
			202: {"Accepted (command_id), or ignored: no routing rule names it.", api.HookResponse{}},
		}, http.StatusBadRequest, http.StatusUnauthorized, http.StatusNotFound, http.StatusRequestTimeout, http.StatusRequestEntityTooLarge,
			http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity, http.StatusInternalServerError, http.StatusServiceUnavailable),
	},
	{
		Method: "POST", Path: "/v1/runs", ID: "createRun", Tag: "arcflow", Scope: "start",
		Summary: "ArcFlow: create a run (a start keyed by Idempotency-Key)",
		Headers: []Param{idempotencyKey}, Body: api.RunRequest{}, BodyRequired: true,
		Responses: errs(map[int]Answer{
			200: {"The run this key already started.", api.RunResponse{}},
			201: {"The run was started.", api.RunResponse{}},
			202: {"Durable, outcome not known yet.", api.AcceptedResponse{}},
		}, with(guarded, 400, 404, 409, 413, 422)...),
	},
	{
		Method: "GET", Path: "/v1/runs/{run_id}", ID: "getRun", Tag: "arcflow", Scope: "read",
		Summary:   "ArcFlow: read a run's status",
		Responses: errs(map[int]Answer{200: {"The run, as its create answered it, with its current status.", api.RunResponse{}}}, with(guarded, 400, 404)...),
	},
	{
		Method: "POST", Path: "/v1/runs/{run_id}/external/{binding_id}", ID: "runExternalCallback", Tag: "arcflow", Scope: "signal",
		Summary: "ArcFlow: deliver an external callback to a run",
		Description: "Authenticated by X-Harvest-Signature when ArcFlow secrets are configured, else by a token with the signal scope. " +
			"The signature is bound to the request: a callback signed for one run, binding or key, or more than 5 minutes ago, is refused (401 invalid_signature). " +
			"X-Idempotency-Key delivers it once.",
		Headers: []Param{
			{Name: "X-Idempotency-Key", Description: "Delivers the callback once."},
			{Name: "X-Harvest-Signature", Description: "t=<unix seconds>,v1=<hex HMAC-SHA256 under an ArcFlow secret of t, the method, the path, " +
				"the X-Idempotency-Key (empty for none), each followed by a line feed, then the body as sent>. " +
				"Required when ArcFlow secrets are configured (the body-only X-ArcFlow-Signature only with arcflow.legacy_body_only_signatures)."},
		},
		Body: json.RawMessage(nil),
		Responses: errs(map[int]Answer{
			202: {"Delivered (accepted), a repeated key (already_processed), or durable and not applied yet (accepted with command_id).", api.ExternalResponse{}},
		}, with(guarded, 400, 404, 408, 409, 413, 422)...),
	},
	{
		Method: "GET", Path: "/healthz", ID: "health", Tag: "operations",
		Summary:   "The process serves",
		Responses: map[int]Answer{200: {"Alive.", api.HealthResponse{}}},
	},
	{
		Method: "GET", Path: "/readyz", ID: "ready", Tag: "operations",
		Summary: "The process can take requests",
		Responses: map[int]Answer{
			200: {"Ready (status ready), or serving with something every ingest shares wrong (status degraded: PostgreSQL unreadable, shards not applying, " +
				"the budget of a webhook source or of the requests without a token full, named in saturated; reasons say what).", api.ReadinessResponse{}},
			503: {"Not ready (this process cannot accept commands: JetStream unreachable, or every slot of max_in_flight taken, saturated [\"api\"]), and why.", api.ReadinessResponse{}},
		},
	},
	{
		Method: "GET", Path: "/metrics", ID: "metrics", Tag: "operations", Scope: "metrics",
		Summary:     "Prometheus metrics",
		Description: "Every workflow's series: needs the metrics scope (admin holds it), and a token limited to workflows is refused (403) whatever its scopes.",
		Responses:   errs(map[int]Answer{200: {"The metrics, in Prometheus' text format.", text("text/plain")}}, guarded...),
	},
	{
		Method: "GET", Path: "/openapi.json", ID: "openapi", Tag: "operations",
		Summary:   "This description of the API",
		Responses: map[int]Answer{200: {"The OpenAPI 3.1 document.", text("application/json")}},
	},
}
