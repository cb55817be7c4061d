package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/client"
)

// The HTTP bodies are package api's types, encoded by the server and
// decoded by the client (package client re-exports them). These tests
// fill every field of every one, send it the way each side does, and
// require it back whole, so that a field one side cannot carry fails
// here. A field added to a body must be carried by the client's result
// too; a struct added to api is a body (and so tested), and one added to
// the client must be declared a body or not.

// wireTypes are the request and answer bodies of the API.
var wireTypes = []any{
	// Errors.
	api.ErrorResponse{}, api.Violation{},
	// Starts, signals, cancellations.
	api.StartRequest{}, api.StartResponse{}, api.AcceptedResponse{},
	api.StartPolicy{}, api.Throttle{}, api.Debounce{}, api.Batch{}, api.Concurrency{}, api.ConcurrencyResponse{},
	api.SignalResponse{}, api.SignalWithStartRequest{}, api.SignalWithStartResponse{}, api.Update{},
	api.CancelRequest{}, api.CancelResponse{}, api.TerminateRequest{}, api.TerminateResponse{},
	api.CountExecutionsResponse{}, api.PendingActivity{}, api.Waiting{}, api.Wait{}, api.WaitCase{}, api.BatchRequest{}, api.BatchFilter{}, api.BatchSignalSpec{}, api.BatchResetSpec{}, api.BatchOperation{}, api.BatchError{}, api.ListBatchesResponse{},
	api.ResetRequest{}, api.ResetPoint{}, api.ResetResponse{}, api.ResetPlan{}, api.ResetActivity{}, api.ResetTimer{}, api.ResetSignal{},
	// Reads.
	api.CommandResponse{}, api.Execution{}, api.TaskFailing{}, api.HistoryWarning{}, api.ExportedHistory{}, api.ListExecutionsResponse{},
	api.KeyClaim{}, api.DuplicateCounts{}, api.SignalKey{}, api.CallbackDelivery{}, api.WaitingFor{},
	api.Event{}, api.HistoryResponse{}, api.DeadCommand{}, api.ListDeadCommandsResponse{},
	api.State{}, api.ListStatesResponse{}, api.ListChildrenResponse{}, api.Child{},
	api.RetentionResponse{}, api.WorkflowRetention{},
	api.Worker{}, api.WorkerSlots{}, api.SlotUsage{}, api.ReplayRefusal{}, api.ListWorkersResponse{},
	api.TaskQueueResponse{}, api.NameBacklog{}, api.UnroutedBacklog{},
	// Admission, webhooks, ArcFlow runs, health.
	api.AdmissionGate{}, api.CloseAdmissionRequest{}, api.ListAdmissionResponse{},
	api.WorkflowSummary{}, api.ListWorkflowsResponse{},
	api.WorkflowVersionsResponse{}, api.BuildCount{}, api.ChangeVersions{}, api.VersionCount{},
	api.HookResponse{}, api.RunRequest{}, api.RunResponse{}, api.ExternalResponse{},
	api.ListWebhooksResponse{}, api.WebhookSource{}, api.RoutingRule{}, api.WebhookCounts{}, api.WebhookRefusals{},
	api.BindingSummary{}, api.BindingCounts{},
	api.HealthResponse{}, api.ReadinessResponse{}, api.FailingShard{},
	// Schedules.
	api.ScheduleSpec{}, api.ScheduleRequest{}, api.Schedule{}, api.ScheduleNextFire{}, api.ScheduleFire{},
	api.ScheduleList{}, api.ScheduleFireList{}, api.SchedulePauseRequest{}, api.ScheduleBackfillRequest{}, api.ScheduleActionResponse{},
}

// notWire are package client's structs that are no HTTP body.
var notWire = []string{
	"Config", "Client", "StartOptions", "StartResult", "CommandStatus", "SignalWithStartOptions", "SignalWithStartResult", "CloseResult",
	"ListOptions", "DeadCommandsOptions", "StateOptions", "APIError", "PendingError", "ExecutionFailedError", "UpdateOptions",
	"ListSchedulesOptions", "ListFiresOptions",
}

func TestEveryWireTypeRoundTrips(t *testing.T) {
	for _, zero := range wireTypes {
		typ := reflect.TypeOf(zero)
		t.Run(typ.Name(), func(t *testing.T) {
			sent := reflect.New(typ)
			fill(t, sent.Elem(), typ.Name())
			requireNoZero(t, sent.Elem(), typ.Name())

			var raw []byte
			if strings.HasSuffix(typ.Name(), "Request") {
				// As the client sends it.
				var err error
				raw, err = json.Marshal(sent.Interface())
				require.NoError(t, err)
			} else {
				// As the server answers.
				rec := httptest.NewRecorder()
				writeJSON(rec, http.StatusOK, sent.Interface())
				raw = rec.Body.Bytes()
			}
			got := reflect.New(typ)
			require.NoError(t, json.Unmarshal(raw, got.Interface()), "%s", raw)
			clearUnencoded(got.Elem())
			require.Equal(t, sent.Interface(), got.Interface(), "%s", raw)
		})
	}
}

// TestEveryStructIsClassified: a struct added to package api is a wire
// type (and round-trips above); one added to package client is a wire
// type or is named as not one.
func TestEveryStructIsClassified(t *testing.T) {
	wire := map[string]bool{}
	for _, zero := range wireTypes {
		wire[reflect.TypeOf(zero).Name()] = true
	}
	known := maps.Clone(wire)
	for _, name := range notWire {
		known[name] = true
	}
	for pkg, allowed := range map[string]map[string]bool{"api": wire, "client": known} {
		fset := token.NewFileSet()
		for _, f := range parseSources(t, fset, filepath.Join("..", "..", pkg)) {
			ast.Inspect(f, func(n ast.Node) bool {
				if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.IsExported() {
					if _, isStruct := ts.Type.(*ast.StructType); isStruct {
						require.True(t, allowed[ts.Name.Name], "%s.%s (%s): add it to wireTypes (or, in client, notWire)", pkg, ts.Name.Name, fset.Position(ts.Pos()))
					}
				}
				return true
			})
		}
	}
}

// parseSources parses the Go files of dir, tests left out.
func parseSources(t *testing.T, fset *token.FileSet, dir string) []*ast.File {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var files []*ast.File
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		require.NoError(t, err)
		files = append(files, f)
	}
	require.NotEmpty(t, files, dir)
	return files
}

// TestIngestDeclaresNoBodies: ingest encodes and decodes package api's
// types only; a struct with JSON tags of its own would be a second home
// for a body. The exceptions decode one member of a request as it was
// sent, or are not HTTP bodies.
func TestIngestDeclaresNoBodies(t *testing.T) {
	exceptions := map[string]bool{
		"unstorableKey": true, // reads a start's idempotency_key raw
	}
	fset := token.NewFileSet()
	for _, f := range parseSources(t, fset, ".") {
		for _, decl := range f.Decls {
			where := "a declaration"
			if fn, ok := decl.(*ast.FuncDecl); ok {
				where = fn.Name.Name
			}
			ast.Inspect(decl, func(n ast.Node) bool {
				st, ok := n.(*ast.StructType)
				if !ok || exceptions[where] {
					return true
				}
				for _, field := range st.Fields.List {
					if field.Tag != nil && strings.Contains(field.Tag.Value, "json:") {
						t.Errorf("%s: %s declares a JSON body; use (or add) a type of package api", fset.Position(field.Pos()), where)
					}
				}
				return true
			})
		}
	}
}

// TestTheClientCarriesEveryAnswer: what the server sends, the client's
// methods hand over, field by field.
func TestTheClientCarriesEveryAnswer(t *testing.T) {
	serve := func(t *testing.T, status int, answer any) *client.Client {
		t.Helper()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "3")
			writeJSON(w, status, answer)
		}))
		t.Cleanup(srv.Close)
		c, err := client.New(client.Config{BaseURL: srv.URL})
		require.NoError(t, err)
		return c
	}
	ctx := context.Background()

	t.Run("start", func(t *testing.T) {
		var a api.StartResponse
		fill(t, reflect.ValueOf(&a).Elem(), "start")
		r, err := serve(t, http.StatusOK, a).Start(ctx, "w", nil, client.StartOptions{})
		require.NoError(t, err)
		require.False(t, r.Deferred)
		require.Empty(t, r.CommandID)
		// What only a deferred start's answer fills: the next subtest.
		r.Deferred, r.CommandID = true, "deferred"
		requireCarries(t, a, *r, nil)
	})
	t.Run("start deferred", func(t *testing.T) {
		a := api.AcceptedResponse{CommandID: "cmd", Status: api.CommandDeferred}
		r, err := serve(t, http.StatusAccepted, a).Start(ctx, "w", nil, client.StartOptions{StartPolicy: &api.StartPolicy{Batch: &api.Batch{MaxSize: 2, MaxWait: "1s"}}})
		require.NoError(t, err)
		require.True(t, r.Deferred)
		require.Equal(t, "cmd", r.CommandID)
		require.Empty(t, r.ExecutionID)
	})
	t.Run("signal-with-start", func(t *testing.T) {
		var a api.SignalWithStartResponse
		fill(t, reflect.ValueOf(&a).Elem(), "sws")
		r, err := serve(t, http.StatusOK, a).SignalWithStart(ctx, "w", client.SignalWithStartOptions{WorkflowID: "o", SignalName: "s"})
		require.NoError(t, err)
		requireCarries(t, a, *r, nil)
	})
	t.Run("cancel", func(t *testing.T) {
		var a api.CancelResponse
		fill(t, reflect.ValueOf(&a).Elem(), "cancel")
		r, err := serve(t, http.StatusOK, a).Cancel(ctx, "e", "why")
		require.NoError(t, err)
		requireCarries(t, a, *r, nil)
	})
	t.Run("terminate", func(t *testing.T) {
		var a api.TerminateResponse
		fill(t, reflect.ValueOf(&a).Elem(), "terminate")
		r, err := serve(t, http.StatusOK, a).Terminate(ctx, "e", "")
		require.NoError(t, err)
		require.False(t, r.CancelRequested)
		r.CancelRequested = true // a cancel's alone: no termination sets it
		requireCarries(t, a, *r, nil)
	})
	t.Run("command", func(t *testing.T) {
		var a api.CommandResponse
		fill(t, reflect.ValueOf(&a).Elem(), "command")
		a.Status = api.CommandRejected
		r, err := serve(t, http.StatusOK, a).Command(ctx, "c")
		require.NoError(t, err)
		require.False(t, r.Deferred)
		// Status is told as Applied, Rejected and Deferred; a deferred
		// one is the next check.
		r.Deferred = true
		requireCarries(t, a, *r, map[string]string{"Status": ""})
		deferred, err := serve(t, http.StatusOK, api.AcceptedResponse{CommandID: "c", Status: api.CommandDeferred}).Command(ctx, "c")
		require.NoError(t, err)
		require.True(t, deferred.Deferred)
		require.False(t, deferred.Applied)
	})
	t.Run("describe", func(t *testing.T) {
		var a api.Execution
		fill(t, reflect.ValueOf(&a).Elem(), "execution")
		r, err := serve(t, http.StatusOK, a).Describe(ctx, "e")
		require.NoError(t, err)
		requireCarries(t, a, *r, nil)
	})
	t.Run("list", func(t *testing.T) {
		var a api.ListExecutionsResponse
		fill(t, reflect.ValueOf(&a).Elem(), "list")
		r, err := serve(t, http.StatusOK, a).List(ctx, client.ListOptions{})
		require.NoError(t, err)
		requireCarriesEach(t, a.Executions, r)
	})
	t.Run("history", func(t *testing.T) {
		var a api.HistoryResponse
		fill(t, reflect.ValueOf(&a).Elem(), "history")
		r, err := serve(t, http.StatusOK, a).History(ctx, "e")
		require.NoError(t, err)
		requireCarriesEach(t, a.Events, r)
	})
	t.Run("dead commands", func(t *testing.T) {
		var a api.ListDeadCommandsResponse
		fill(t, reflect.ValueOf(&a).Elem(), "dead")
		r, err := serve(t, http.StatusOK, a).DeadCommands(ctx, client.DeadCommandsOptions{})
		require.NoError(t, err)
		require.Equal(t, a.DeadCommands, r)
		d, err := serve(t, http.StatusOK, a.DeadCommands[0]).DeadCommand(ctx, 1)
		require.NoError(t, err)
		require.Equal(t, a.DeadCommands[0], *d)
	})
	t.Run("retention", func(t *testing.T) {
		var a api.RetentionResponse
		fill(t, reflect.ValueOf(&a).Elem(), "retention")
		r, err := serve(t, http.StatusOK, a).Retention(ctx, time.Now())
		require.NoError(t, err)
		require.Equal(t, a, *r)
		r, err = serve(t, http.StatusAccepted, a).PruneNow(ctx)
		require.NoError(t, err)
		require.Equal(t, a, *r)
	})
	t.Run("workers", func(t *testing.T) {
		var a api.ListWorkersResponse
		fill(t, reflect.ValueOf(&a).Elem(), "workers")
		r, err := serve(t, http.StatusOK, a).Workers(ctx)
		require.NoError(t, err)
		requireCarriesEach(t, a.Workers, r)
	})
	t.Run("task queue", func(t *testing.T) {
		var a api.TaskQueueResponse
		fill(t, reflect.ValueOf(&a).Elem(), "queue")
		r, err := serve(t, http.StatusOK, a).TaskQueue(ctx, "q")
		require.NoError(t, err)
		require.Equal(t, a, *r)
	})
	t.Run("error", func(t *testing.T) {
		var a api.ErrorResponse
		fill(t, reflect.ValueOf(&a).Elem(), "error")
		_, err := serve(t, http.StatusConflict, a).Describe(ctx, "e")
		var apiErr *client.APIError
		require.ErrorAs(t, err, &apiErr)
		requireCarries(t, a, *apiErr, map[string]string{"Error": "Code"})
		require.Equal(t, http.StatusConflict, apiErr.StatusCode)
		require.Equal(t, 3*time.Second, apiErr.RetryAfter)
	})
}

// requireCarries requires that result holds every field of answer, under
// the same name or the one renames gives ("" for a field told otherwise),
// and that no field of result stayed zero.
func requireCarries(t *testing.T, answer, result any, renames map[string]string) {
	t.Helper()
	av, rv := reflect.ValueOf(answer), reflect.ValueOf(result)
	for i := range av.NumField() {
		f := av.Type().Field(i)
		if !f.IsExported() || f.Tag.Get("json") == "-" {
			continue
		}
		name, renamed := renames[f.Name]
		if !renamed {
			name = f.Name
		}
		if name == "" {
			continue
		}
		got := rv.FieldByName(name)
		require.True(t, got.IsValid(), "%s has no field %s to carry %s.%s", rv.Type(), name, av.Type(), f.Name)
		want := av.Field(i)
		if want.Kind() == reflect.Pointer && got.Kind() != reflect.Pointer {
			want = want.Elem()
		}
		require.Equal(t, want.Interface(), got.Interface(), "%s.%s", rv.Type(), name)
	}
	requireNoZero(t, rv, rv.Type().String())
}

// requireCarriesEach is requireCarries for each of a list's items.
func requireCarriesEach[T any](t *testing.T, answers, results []T) {
	t.Helper()
	require.Len(t, results, len(answers))
	for i := range answers {
		requireCarries(t, answers[i], results[i], nil)
	}
}

var (
	typeTime = reflect.TypeFor[time.Time]()
	typeRaw  = reflect.TypeFor[json.RawMessage]()
)

// fill sets every exported field of v that is encoded, recursively, to a
// value that is not zero.
func fill(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch {
	case v.Type() == typeTime:
		v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)))
		return
	case v.Type() == typeRaw:
		v.SetBytes([]byte(`{"k":"` + path + `"}`))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), path)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() && f.Tag.Get("json") != "-" {
				fill(t, v.Field(i), path+"."+f.Name)
			}
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(t, s.Index(0), path+"[0]")
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMapWithSize(v.Type(), 1)
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, path+".key")
		fill(t, e, path+".value")
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Interface:
		v.Set(reflect.ValueOf(path))
	case reflect.String:
		v.SetString(path)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint64:
		v.SetUint(7)
	default:
		t.Fatalf("fill %s: no value for a %s", path, v.Type())
	}
}

// requireNoZero requires that no exported, encoded field of v is zero,
// recursively.
func requireNoZero(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	require.False(t, v.IsZero(), "%s is zero", path)
	switch v.Kind() {
	case reflect.Pointer:
		requireNoZero(t, v.Elem(), path)
	case reflect.Struct:
		if v.Type() == typeTime {
			return
		}
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() && f.Tag.Get("json") != "-" {
				requireNoZero(t, v.Field(i), path+"."+f.Name)
			}
		}
	case reflect.Slice:
		if v.Type() == typeRaw {
			return
		}
		for i := range v.Len() {
			requireNoZero(t, v.Index(i), path)
		}
	}
}

// clearUnencoded zeroes the fields a decoder fills from outside the JSON
// (Raw), recursively.
func clearUnencoded(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			clearUnencoded(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			switch {
			case !f.IsExported():
			case f.Tag.Get("json") == "-":
				v.Field(i).SetZero()
			default:
				clearUnencoded(v.Field(i))
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			clearUnencoded(v.Index(i))
		}
	}
}

// TestCommandOutcomesAreSentAsTheyWere: a command's outcome is its
// request's answer, embedded as it is.
func TestCommandOutcomesAreSentAsTheyWere(t *testing.T) {
	delivered := true
	answer := api.SignalResponse{OK: true, SignalDelivered: &delivered}
	outcome, err := json.Marshal(answer)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	writeJSON(rec, http.StatusOK, api.CommandResponse{CommandID: "c", Status: api.CommandApplied, HTTPStatus: http.StatusAccepted, Outcome: outcome})
	require.Equal(t, `{"command_id":"c","http_status":202,"outcome":{"ok":true,"signal_delivered":true},"status":"applied"}`,
		string(bytes.TrimSpace(rec.Body.Bytes())))
}
