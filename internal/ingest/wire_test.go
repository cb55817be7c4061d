package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
)

// The HTTP bodies are the client package's types, encoded by the server
// and decoded by the client. These tests fill every field of every one,
// send it the way each side does, and require it back whole, so that a
// field one side cannot carry fails here. A field added to a body must be
// carried by the client's result too, and a struct added to the client
// must be declared a body (and so tested) or not.

// wireTypes are the request and answer bodies of the API.
var wireTypes = []any{
	// Errors.
	client.ErrorResponse{}, client.Violation{},
	// Starts, signals, cancellations.
	client.StartRequest{}, client.StartResponse{}, client.AcceptedResponse{},
	client.StartPolicy{}, client.Throttle{}, client.Debounce{}, client.Batch{},
	client.SignalResponse{}, client.SignalWithStartRequest{}, client.SignalWithStartResponse{},
	client.CancelRequest{}, client.CancelResponse{}, client.TerminateRequest{}, client.TerminateResponse{},
	// Reads.
	client.CommandResponse{}, client.Execution{}, client.ListExecutionsResponse{},
	client.KeyClaim{}, client.DuplicateCounts{}, client.SignalKey{}, client.CallbackDelivery{}, client.WaitingFor{},
	client.Event{}, client.HistoryResponse{}, client.DeadCommand{}, client.ListDeadCommandsResponse{},
	client.RetentionResponse{}, client.WorkflowRetention{},
	client.Worker{}, client.WorkerSlots{}, client.SlotUsage{}, client.ListWorkersResponse{},
	client.TaskQueueResponse{}, client.NameBacklog{}, client.UnroutedBacklog{},
	// Admission, webhooks, ArcFlow runs, health.
	client.AdmissionGate{}, client.CloseAdmissionRequest{}, client.ListAdmissionResponse{},
	client.WorkflowSummary{}, client.ListWorkflowsResponse{},
	client.HookResponse{}, client.RunRequest{}, client.RunResponse{}, client.ExternalResponse{},
	client.ListWebhooksResponse{}, client.WebhookSource{}, client.RoutingRule{}, client.WebhookCounts{}, client.WebhookRefusals{},
	client.BindingSummary{}, client.BindingCounts{},
	client.HealthResponse{}, client.ReadinessResponse{}, client.FailingShard{},
}

// notWire are the client's structs that are no HTTP body.
var notWire = []string{
	"Config", "Client", "StartOptions", "StartResult", "CommandStatus", "SignalWithStartOptions", "SignalWithStartResult", "CloseResult",
	"ListOptions", "DeadCommandsOptions", "APIError", "PendingError", "ExecutionFailedError",
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

// TestEveryClientStructIsClassified: a struct added to the client package
// is a wire type (and round-trips above) or is named as not one.
func TestEveryClientStructIsClassified(t *testing.T) {
	known := map[string]bool{}
	for _, zero := range wireTypes {
		known[reflect.TypeOf(zero).Name()] = true
	}
	for _, name := range notWire {
		known[name] = true
	}
	fset := token.NewFileSet()
	for _, f := range parseSources(t, fset, filepath.Join("..", "..", "client")) {
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.IsExported() {
				if _, isStruct := ts.Type.(*ast.StructType); isStruct {
					require.True(t, known[ts.Name.Name], "client.%s (%s): add it to wireTypes or notWire", ts.Name.Name, fset.Position(ts.Pos()))
				}
			}
			return true
		})
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

// TestIngestDeclaresNoBodies: ingest encodes and decodes the client's
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
						t.Errorf("%s: %s declares a JSON body; use (or add) a type of the client package", fset.Position(field.Pos()), where)
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
		var a client.StartResponse
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
		a := client.AcceptedResponse{CommandID: "cmd", Status: client.CommandDeferred}
		r, err := serve(t, http.StatusAccepted, a).Start(ctx, "w", nil, client.StartOptions{StartPolicy: &client.StartPolicy{Batch: &client.Batch{MaxSize: 2, MaxWait: "1s"}}})
		require.NoError(t, err)
		require.True(t, r.Deferred)
		require.Equal(t, "cmd", r.CommandID)
		require.Empty(t, r.ExecutionID)
	})
	t.Run("signal-with-start", func(t *testing.T) {
		var a client.SignalWithStartResponse
		fill(t, reflect.ValueOf(&a).Elem(), "sws")
		r, err := serve(t, http.StatusOK, a).SignalWithStart(ctx, "w", client.SignalWithStartOptions{WorkflowID: "o", SignalName: "s"})
		require.NoError(t, err)
		requireCarries(t, a, *r, nil)
	})
	t.Run("cancel", func(t *testing.T) {
		var a client.CancelResponse
		fill(t, reflect.ValueOf(&a).Elem(), "cancel")
		r, err := serve(t, http.StatusOK, a).Cancel(ctx, "e", "why")
		require.NoError(t, err)
		requireCarries(t, a, *r, nil)
	})
	t.Run("terminate", func(t *testing.T) {
		var a client.TerminateResponse
		fill(t, reflect.ValueOf(&a).Elem(), "terminate")
		r, err := serve(t, http.StatusOK, a).Terminate(ctx, "e", "")
		require.NoError(t, err)
		requireCarries(t, a, *r, nil)
	})
	t.Run("command", func(t *testing.T) {
		var a client.CommandResponse
		fill(t, reflect.ValueOf(&a).Elem(), "command")
		a.Status = client.CommandRejected
		r, err := serve(t, http.StatusOK, a).Command(ctx, "c")
		require.NoError(t, err)
		require.False(t, r.Deferred)
		// Status is told as Applied, Rejected and Deferred; a deferred
		// one is the next check.
		r.Deferred = true
		requireCarries(t, a, *r, map[string]string{"Status": ""})
		deferred, err := serve(t, http.StatusOK, client.AcceptedResponse{CommandID: "c", Status: client.CommandDeferred}).Command(ctx, "c")
		require.NoError(t, err)
		require.True(t, deferred.Deferred)
		require.False(t, deferred.Applied)
	})
	t.Run("describe", func(t *testing.T) {
		var a client.Execution
		fill(t, reflect.ValueOf(&a).Elem(), "execution")
		r, err := serve(t, http.StatusOK, a).Describe(ctx, "e")
		require.NoError(t, err)
		requireCarries(t, a, *r, nil)
	})
	t.Run("list", func(t *testing.T) {
		var a client.ListExecutionsResponse
		fill(t, reflect.ValueOf(&a).Elem(), "list")
		r, err := serve(t, http.StatusOK, a).List(ctx, client.ListOptions{})
		require.NoError(t, err)
		requireCarriesEach(t, a.Executions, r)
	})
	t.Run("history", func(t *testing.T) {
		var a client.HistoryResponse
		fill(t, reflect.ValueOf(&a).Elem(), "history")
		r, err := serve(t, http.StatusOK, a).History(ctx, "e")
		require.NoError(t, err)
		requireCarriesEach(t, a.Events, r)
	})
	t.Run("dead commands", func(t *testing.T) {
		var a client.ListDeadCommandsResponse
		fill(t, reflect.ValueOf(&a).Elem(), "dead")
		r, err := serve(t, http.StatusOK, a).DeadCommands(ctx, client.DeadCommandsOptions{})
		require.NoError(t, err)
		require.Equal(t, a.DeadCommands, r)
		d, err := serve(t, http.StatusOK, a.DeadCommands[0]).DeadCommand(ctx, 1)
		require.NoError(t, err)
		require.Equal(t, a.DeadCommands[0], *d)
	})
	t.Run("retention", func(t *testing.T) {
		var a client.RetentionResponse
		fill(t, reflect.ValueOf(&a).Elem(), "retention")
		r, err := serve(t, http.StatusOK, a).Retention(ctx, time.Now())
		require.NoError(t, err)
		require.Equal(t, a, *r)
		r, err = serve(t, http.StatusAccepted, a).PruneNow(ctx)
		require.NoError(t, err)
		require.Equal(t, a, *r)
	})
	t.Run("workers", func(t *testing.T) {
		var a client.ListWorkersResponse
		fill(t, reflect.ValueOf(&a).Elem(), "workers")
		r, err := serve(t, http.StatusOK, a).Workers(ctx)
		require.NoError(t, err)
		requireCarriesEach(t, a.Workers, r)
	})
	t.Run("task queue", func(t *testing.T) {
		var a client.TaskQueueResponse
		fill(t, reflect.ValueOf(&a).Elem(), "queue")
		r, err := serve(t, http.StatusOK, a).TaskQueue(ctx, "q")
		require.NoError(t, err)
		require.Equal(t, a, *r)
	})
	t.Run("error", func(t *testing.T) {
		var a client.ErrorResponse
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
	answer := client.SignalResponse{OK: true, SignalDelivered: &delivered}
	outcome, err := json.Marshal(answer)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	writeJSON(rec, http.StatusOK, client.CommandResponse{CommandID: "c", Status: client.CommandApplied, HTTPStatus: http.StatusAccepted, Outcome: outcome})
	require.Equal(t, `{"command_id":"c","http_status":202,"outcome":{"ok":true,"signal_delivered":true},"status":"applied"}`,
		string(bytes.TrimSpace(rec.Body.Bytes())))
}
