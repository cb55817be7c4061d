package tracing_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/tracing"
)

// TestOneTracePerStart starts executions with tracing on (the SDK's
// in-memory exporter) and checks that each start is one trace, a child of
// the request's traceparent, whose spans cover ingest, the scheduler's
// applies, the worker's workflow tasks and each activity, every span's
// parent in the trace; that no span of the execution is in another
// trace; and that a duplicate start's span says which layer
// short-circuited it.
func TestOneTracePerStart(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		workflow string
		input    string
		eager    bool
		// spans the trace must have, by name, besides the request's and
		// the start's apply.
		want []string
		// tasks is the least number of workflow tasks in the trace.
		tasks int
	}{
		{name: "eager activities", workflow: "onboarding", input: `{"user_id": 7}`, eager: true,
			want: []string{"workflow task onboarding", "activity create_db_user", "activity send_welcome_email", "apply wft_completed"}},
		{name: "activity tasks", workflow: "onboarding", input: `{"user_id": 8}`,
			want: []string{"workflow task onboarding", "activity create_db_user", "activity send_welcome_email", "apply wft_completed", "apply activity_result"}},
		// The workflow task after the timer has no command behind it: it
		// goes on in the trace the execution was started under.
		{name: "durable timer", workflow: "sleep", input: `{"duration": "200ms"}`,
			want: []string{"workflow task sleep", "apply wft_completed"}, tasks: 2},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			s := stacktest.Start(t, devstack.Config{Tracing: tracing.New(tp), Worker: harvest.WorkerConfig{DisableEagerActivities: !tc.eager}})

			// The caller's own trace: the request's span is its child.
			callerTrace := fmt.Sprintf("4bf92f3577b34da6a3ce929d0e0e47%02x", i)
			callerSpan := "00f067aa0ba902b7"
			url := s.URL() + "/api/harvest/workflows/" + tc.workflow + "/start"
			key := "trace-" + tc.workflow + "-" + tc.name
			first := stacktest.Call(t, "POST", url, map[string]string{"Idempotency-Key": key, "traceparent": "00-" + callerTrace + "-" + callerSpan + "-01"},
				`{"input": `+tc.input+`}`)
			require.Equal(t, 201, first.Status, first.Body)
			id := first.Body["execution_id"].(string)
			stacktest.WaitCompleted(t, s, id)

			// Spans end once their work is done (an apply's after its
			// commit), a moment after the execution shows Completed.
			var spans tracetest.SpanStubs
			probe.Until(t, 30*time.Second, "the trace's spans", func() bool {
				spans = inTrace(exp.GetSpans(), callerTrace)
				return hasSpans(spans, append([]string{"POST /api/harvest/workflows/{name}/start", "apply start"}, tc.want...)) &&
					closing(spans, tc.tasks)
			})
			byID := map[trace.SpanID]tracetest.SpanStub{}
			for _, sp := range spans {
				byID[sp.SpanContext.SpanID()] = sp
			}
			eager := 0
			for _, sp := range spans {
				parent, ok := byID[sp.Parent.SpanID()]
				if sp.Name == "POST /api/harvest/workflows/{name}/start" {
					require.Equal(t, callerSpan, sp.Parent.SpanID().String(), "the request's span is a child of the caller's")
					require.True(t, sp.Parent.IsRemote())
					require.Equal(t, trace.SpanKindServer, sp.SpanKind)
					require.Equal(t, tc.workflow, attr(sp, tracing.AttrWorkflow).AsString())
					require.Equal(t, id, attr(sp, tracing.AttrExecutionID).AsString())
					require.False(t, attr(sp, tracing.AttrDeduplicated).AsBool())
					continue
				}
				require.True(t, ok, "span %q has its parent in the trace", sp.Name)
				switch {
				case sp.Name == "apply start":
					require.Equal(t, "POST /api/harvest/workflows/{name}/start", parent.Name)
					require.Equal(t, id, attr(sp, tracing.AttrExecutionID).AsString())
					require.Equal(t, tc.workflow, attr(sp, tracing.AttrWorkflow).AsString())
					require.False(t, attr(sp, tracing.AttrDeduplicated).AsBool())
				case strings.HasPrefix(sp.Name, "apply "):
					require.Contains(t, []string{"workflow task " + tc.workflow, "activity create_db_user", "activity send_welcome_email"}, parent.Name,
						"%s follows the task that published its command", sp.Name)
					require.Equal(t, id, attr(sp, tracing.AttrExecutionID).AsString())
				case strings.HasPrefix(sp.Name, "workflow task "):
					require.True(t, strings.HasPrefix(parent.Name, "apply "), "%s follows an apply, not %s", sp.Name, parent.Name)
					require.Equal(t, id, attr(sp, tracing.AttrExecutionID).AsString())
				case strings.HasPrefix(sp.Name, "activity "):
					if attr(sp, tracing.AttrEager).AsBool() {
						require.True(t, tc.eager)
						require.Equal(t, "workflow task "+tc.workflow, parent.Name, "an eager attempt runs within its workflow task")
						eager++
					} else {
						require.True(t, strings.HasPrefix(parent.Name, "apply "), "%s follows the apply that dispatched it", sp.Name)
					}
					require.Equal(t, id, attr(sp, tracing.AttrExecutionID).AsString())
					require.Equal(t, tc.workflow, attr(sp, tracing.AttrWorkflow).AsString())
				default:
					t.Fatalf("unexpected span %q", sp.Name)
				}
			}
			if tc.eager {
				require.Positive(t, eager, "an eager attempt's span")
			}
			// Every span about the execution is in this one trace.
			for _, sp := range exp.GetSpans() {
				if v, ok := attrOf(sp, tracing.AttrExecutionID); ok && v.AsString() == id {
					require.Equal(t, callerTrace, sp.SpanContext.TraceID().String(), "span %q of the execution is in its trace", sp.Name)
				}
			}

			// A retry of the start, in a trace of its own, says that it
			// was a duplicate and which layer answered it.
			again := stacktest.Call(t, "POST", url, map[string]string{"Idempotency-Key": key}, `{"input": `+tc.input+`}`)
			require.Equal(t, 200, again.Status, again.Body)
			var dup tracetest.SpanStub
			probe.Until(t, 10*time.Second, "the retry's span", func() bool {
				for _, sp := range exp.GetSpans() {
					if sp.Name == "POST /api/harvest/workflows/{name}/start" && sp.SpanContext.TraceID().String() != callerTrace {
						dup = sp
						return true
					}
				}
				return false
			})
			require.True(t, attr(dup, tracing.AttrDeduplicated).AsBool())
			require.Equal(t, id, attr(dup, tracing.AttrExecutionID).AsString())
			require.Contains(t, []string{"broker", "claim"}, attr(dup, tracing.AttrDedupLayer).AsString())
		})
	}
}

func inTrace(spans tracetest.SpanStubs, traceID string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, sp := range spans {
		if sp.SpanContext.TraceID().String() == traceID {
			out = append(out, sp)
		}
	}
	return out
}

func hasSpans(spans tracetest.SpanStubs, names []string) bool {
	have := map[string]bool{}
	for _, sp := range spans {
		have[sp.Name] = true
	}
	for _, n := range names {
		if !have[n] {
			return false
		}
	}
	return true
}

// closing says whether spans hold at least least workflow tasks and the
// apply of each, the last of which completed the execution.
func closing(spans tracetest.SpanStubs, least int) bool {
	tasks, applies := 0, 0
	for _, sp := range spans {
		switch {
		case strings.HasPrefix(sp.Name, "workflow task "):
			tasks++
		case sp.Name == "apply wft_completed":
			applies++
		}
	}
	return tasks > 0 && tasks >= least && applies == tasks
}

func attrOf(sp tracetest.SpanStub, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range sp.Attributes {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func attr(sp tracetest.SpanStub, key attribute.Key) attribute.Value {
	v, _ := attrOf(sp, key)
	return v
}
