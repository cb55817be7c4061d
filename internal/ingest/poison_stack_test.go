package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/binding"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/testing/poison"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/webhook"
)

const poisonArcFlowSecret = "arcflow-poison-secret"

// TestPoisonIsRefusedAtEveryEdge throws generated poison (U+0000 escaped
// and raw, unpaired surrogates, bytes that are not UTF-8, numbers beyond
// numeric's range or that grow too much written out, deep nesting, huge
// strings near the body limit) at every entry point: start, signal,
// signal-with-start (its search attributes too), a schedule's search
// attributes, cancel, /v1/runs and its external callback, a
// signed and an unsigned webhook source, and a NATS binding. Each is
// refused at the edge (400 with its code, or a dead letter), a keyed
// replay of a committed start is still answered, documents that can be
// stored are stored and run faithfully, and afterwards an ordinary keyed
// start completes: no shard was blocked, and the executions table holds
// exactly the executions that were meant to be.
//
// The seed is logged; HARVEST_TEST_POISON_SEED replays one.
func TestPoisonIsRefusedAtEveryEdge(t *testing.T) {
	t.Parallel()
	seed := uint64(20260512)
	if v := os.Getenv("HARVEST_TEST_POISON_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (HARVEST_TEST_POISON_SEED replays it)", seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	orders := binding.Binding{Name: "orders", Stream: "ORDERS", Subject: "orders.>", Rules: []webhook.Rule{
		{Event: "order.created", Workflow: "poison_echo", InputPointer: "/order"},
	}}
	hookRules := []webhook.Rule{
		{Event: "payment", Workflow: "poison_echo", InputPointer: "/data/object"},
		{Event: "note", Workflow: "poison_inbox", Signal: "note", WorkflowID: "{/data/object/inbox}", InputPointer: "/data/object/note"},
	}
	s := stacktest.Start(t, devstack.Config{
		Ingest: ingest.Config{ArcFlowSecrets: []string{poisonArcFlowSecret}, Webhooks: []webhook.Endpoint{
			{Source: webhook.Source{Name: "stripe", Kind: webhook.KindStripe, Secrets: []string{stacktest.StripeSecret}}, Rules: hookRules},
			{Source: webhook.Source{Name: "plain", Kind: webhook.KindNone, AllowUnsigned: true}, Rules: hookRules},
		}},
		Bindings: []binding.Binding{orders},
		Register: func(w *harvest.Worker) {
			harvest.RegisterWorkflow(w, "poison_echo", func(_ *harvest.WorkflowContext, in json.RawMessage) (json.RawMessage, error) {
				return in, nil
			})
			// poison_inbox counts "note" signals until one says "stop".
			harvest.RegisterWorkflow(w, "poison_inbox", func(ctx *harvest.WorkflowContext, _ json.RawMessage) (int, error) {
				note := harvest.NewSignal[json.RawMessage]("note")
				for n := 0; ; n++ {
					v, err := note.Receive(ctx)
					if err != nil {
						return 0, err
					}
					if string(v) == `"stop"` {
						return n, nil
					}
				}
			})
		},
	})
	u := stacktest.NewUserStreams(t, s)
	u.Create(jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	u.Create(jetstream.StreamConfig{Name: "DEAD", Subjects: []string{binding.DeadLetterPrefix + ">"}})

	// What must survive the barrage: a running inbox, and a committed
	// keyed start whose retries are replayed.
	inbox := stacktest.StartWorkflow(t, s, "poison_inbox", "inbox-1", `{"workflow_id": "inbox-main"}`)
	require.Equal(t, 201, inbox.Status, inbox.Body)
	inboxID := inbox.Body["execution_id"].(string)
	committed := stacktest.StartWorkflow(t, s, "poison_echo", "committed-1", `{"input": {"ok": 1}}`)
	require.Equal(t, 201, committed.Status, committed.Body)
	committedID := committed.Body["execution_id"].(string)
	stacktest.WaitCompleted(t, s, committedID)

	api := s.URL() + "/api/harvest"
	// A raw U+0000 byte in a string is not JSON at all: invalid_json.
	payload := []string{"payload_unstorable", "invalid_json"}
	refused := func(what string, a stacktest.Answer, status int, codes ...string) {
		t.Helper()
		require.Equal(t, status, a.Status, "%s: %v", what, a.Body)
		require.Contains(t, codes, a.Body["error"], "%s: %v", what, a.Body)
	}
	hook := func(source string, payload []byte) stacktest.Answer {
		t.Helper()
		sig := ""
		if source == "stripe" {
			sig = stacktest.StripeSign(payload, time.Now())
		}
		return stacktest.Deliver(t, s, source, payload, sig, "application/json")
	}
	external := func(key, body string) stacktest.Answer {
		t.Helper()
		hdr := map[string]string{webhook.HeaderHarvestSignature: arcflowSign(poisonArcFlowSecret, inboxID, "note", key, body)}
		if key != "" {
			hdr["X-Idempotency-Key"] = key
		}
		return stacktest.Call(t, "POST", s.URL()+"/v1/runs/"+inboxID+"/external/note", hdr, body)
	}

	const rounds = 30
	var (
		bound    int                   // messages published to the binding
		accepted = map[string]string{} // execution id -> the input document stored
		stored   = map[string]bool{inboxID: true, committedID: true}
	)
	for r := range rounds {
		v := string(poison.Unstorable(rng))
		if r%10 == 9 {
			// A huge string near the body limit, with one U+0000 at its end.
			v = `"` + strings.Repeat("x", ingest.DefaultMaxBodyBytes-128) + `\u0000"`
		}
		id, key := badIdentifier(rng), badKey(rng)
		what := func(entry string) string { return fmt.Sprintf("round %d, %s, %s", r, entry, show(v)) }

		refused(what("start input"), stacktest.StartWorkflow(t, s, "poison_echo", "", `{"input": `+v+`}`), 400, payload...)
		refused(what("start workflow_id"), stacktest.StartWorkflow(t, s, "poison_echo", "", `{"workflow_id": `+jsonString(id)+`}`), 400, "invalid_workflow_id")
		refused(what("start body key"), stacktest.StartWorkflow(t, s, "poison_echo", "", `{"idempotency_key": `+jsonString(key)+`}`), 400, "invalid_idempotency_key")
		refused(what("start header key"), stacktest.StartWorkflow(t, s, "poison_echo", badHeaderKey(rng), `{}`), 400, "invalid_idempotency_key")
		// A keyed retry of a committed start is replayed, whatever its body.
		replay := stacktest.StartWorkflow(t, s, "poison_echo", "committed-1", `{"input": `+v+`}`)
		require.Equal(t, 200, replay.Status, "%s: %v", what("replay"), replay.Body)
		require.Equal(t, committedID, replay.Body["execution_id"])
		require.Equal(t, true, replay.Body["deduplicated"])

		refused(what("signal payload"), stacktest.Call(t, "POST", api+"/executions/"+inboxID+"/signals/note", nil, v), 400, payload...)
		refused(what("signal query key"), stacktest.Call(t, "POST", api+"/executions/"+inboxID+"/signals/note?idempotency_key="+url.QueryEscape(key), nil, `"x"`),
			400, "invalid_idempotency_key")
		refused(what("signal-with-start payload"), stacktest.Call(t, "POST", api+"/workflows/poison_inbox/signal-with-start", nil,
			`{"workflow_id": "inbox-main", "signal_name": "note", "signal_payload": `+v+`}`), 400, payload...)
		refused(what("signal-with-start input"), stacktest.Call(t, "POST", api+"/workflows/poison_inbox/signal-with-start", nil,
			`{"workflow_id": "inbox-new", "signal_name": "note", "input": `+v+`}`), 400, payload...)
		refused(what("signal-with-start workflow_id"), stacktest.Call(t, "POST", api+"/workflows/poison_inbox/signal-with-start", nil,
			`{"workflow_id": `+jsonString(id)+`, "signal_name": "note"}`), 400, "invalid_workflow_id")
		refused(what("cancel reason"), stacktest.Call(t, "POST", api+"/executions/"+inboxID+"/cancel", nil, `{"reason": `+jsonString(badText(rng))+`}`),
			400, "invalid_reason")
		refused(what("reset reason"), stacktest.Call(t, "POST", api+"/executions/"+inboxID+"/reset?dry_run=true", nil,
			`{"to": "first_task", "reason": `+jsonString(badText(rng))+`}`), 400, "invalid_reason")
		refused(what("reset to"), stacktest.Call(t, "POST", api+"/executions/"+inboxID+"/reset?dry_run=true", nil, `{"to": `+v+`}`),
			400, append(slices.Clone(payload), "invalid_reset_point")...)
		refused(what("batch signal payload"), stacktest.Call(t, "POST", api+"/batches", nil,
			`{"operation": "signal", "filter": {"workflow": "poison_inbox"}, "signal": {"name": "note", "payload": `+v+`}}`), 400, payload...)
		refused(what("batch reason"), stacktest.Call(t, "POST", api+"/batches", nil,
			`{"operation": "cancel", "filter": {"workflow": "poison_inbox"}, "reason": `+jsonString(badText(rng))+`}`), 400, "invalid_reason")
		refused(what("start search attribute"), stacktest.StartWorkflow(t, s, "poison_echo", "", `{"search_attributes": {"x": `+v+`}}`),
			400, append(slices.Clone(payload), "invalid_search_attribute")...)
		refused(what("signal-with-start search attribute"), stacktest.Call(t, "POST", api+"/workflows/poison_inbox/signal-with-start", nil,
			`{"workflow_id": "inbox-new", "signal_name": "note", "search_attributes": {"x": `+v+`}}`), 400, append(slices.Clone(payload), "invalid_search_attribute")...)
		refused(what("schedule search attribute"), stacktest.Call(t, "PUT", api+"/schedules/poison", nil,
			`{"workflow": "poison_echo", "spec": {"every": "1h"}, "search_attributes": {"x": `+v+`}}`), 400, append(slices.Clone(payload), "invalid_search_attribute")...)

		refused(what("run input"), stacktest.Call(t, "POST", s.URL()+"/v1/runs", nil, `{"workflow": "poison_echo", "input": `+v+`}`), 400, payload...)
		refused(what("external callback"), external("", v), 400, payload...)
		refused(what("external callback key"), external(badHeaderKey(rng), `"x"`), 400, "invalid_idempotency_key")

		for _, source := range []string{"stripe", "plain"} {
			refused(what(source+" payment"), hook(source, fmt.Appendf(nil, `{"id": "evt-%d", "type": "payment", "data": {"object": %s}}`, r, v)),
				400, payload...)
			refused(what(source+" note"), hook(source, fmt.Appendf(nil, `{"id": "evt-%d", "type": "note", "data": {"object": {"inbox": "inbox-main", "note": %s}}}`, r, v)),
				400, payload...)
			// An identifier a rule makes of the event: U+0000 or bytes that
			// are not UTF-8 make the body unstorable, control characters
			// only the identifier.
			refused(what(source+" event id"), hook(source, fmt.Appendf(nil, `{"id": %s, "type": "payment", "data": {"object": 1}}`, jsonString(id))),
				400, append(payload, "invalid_event_id")...)
			refused(what(source+" workflow_id"), hook(source, fmt.Appendf(nil, `{"id": "evt-w%d", "type": "note", "data": {"object": {"inbox": %s, "note": 1}}}`, r, jsonString(id))),
				400, append(payload, "invalid_workflow_id")...)
		}
		u.Publish("orders.created", `{"type": "order.created", "order": `+v+`}`, "")
		bound++

		// A document that may or may not be storable: stored and run
		// faithfully, or refused.
		doc := poison.Document(rng)
		body := `{"input": ` + string(doc) + `}`
		a := stacktest.StartWorkflow(t, s, "poison_echo", "doc-"+strconv.Itoa(r), body)
		switch err := storable.CheckJSON([]byte(body)); {
		case err == nil && json.Valid([]byte(body)):
			require.Equal(t, 201, a.Status, "%s: %v", what("storable document"), a.Body)
			id := a.Body["execution_id"].(string)
			accepted[id], stored[id] = string(doc), true
		default:
			refused(what("document"), a, 400, payload...)
		}
	}
	// Over the body limit, poison or not: 413 before anything is read.
	big := `{"input": "` + strings.Repeat("y", ingest.DefaultMaxBodyBytes) + `"}`
	refused("body over the limit", stacktest.StartWorkflow(t, s, "poison_echo", "", big), 413, "payload_too_large")

	// The binding dead-letters every poisoned message and goes on.
	last := u.Publish("orders.created", `{"type": "order.created", "order": {"ok": true}}`, "binding-ok").Sequence
	u.Settled("ORDERS", "orders", last)
	dead, err := u.JetStream().Stream(u.Context(), "DEAD")
	require.NoError(t, err)
	info, err := dead.Info(u.Context())
	require.NoError(t, err)
	require.EqualValues(t, bound, info.State.Msgs)
	require.Equal(t, bound, stacktest.BindingCount(t, s, "orders", "dead_lettered"))
	probe.Until(t, 60*time.Second, "the bound message's execution", func() bool {
		return stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE workflow_name = 'poison_echo' AND idempotency_key LIKE 'conn:%'`) == 1
	})
	var boundID string
	require.NoError(t, s.DB.QueryRow(context.Background(),
		`SELECT execution_id::text FROM executions WHERE idempotency_key LIKE 'conn:%'`).Scan(&boundID))
	stored[boundID] = true

	// Storable documents were stored and run faithfully: the input is
	// the document's value, and the echo's result is the input.
	for id, doc := range accepted {
		stacktest.WaitCompleted(t, s, id)
		var sameInput, sameResult bool
		require.NoError(t, s.DB.QueryRow(context.Background(),
			`SELECT coalesce(input, 'null') = $2::jsonb, coalesce(result, 'null') = coalesce(input, 'null') FROM executions WHERE execution_id = $1`,
			id, doc).Scan(&sameInput, &sameResult))
		require.True(t, sameInput, "execution %s stored another input than %s", id, show(doc))
		require.True(t, sameResult, "execution %s did not run faithfully on %s", id, show(doc))
	}

	// No shard is blocked: an ordinary keyed start completes, and the
	// inbox, which no poisoned signal reached, takes a last one.
	ordinary := stacktest.StartWorkflow(t, s, "poison_echo", "ordinary-after-poison", `{"input": {"n": 1}}`)
	require.Equal(t, 201, ordinary.Status, ordinary.Body)
	stored[ordinary.Body["execution_id"].(string)] = true
	stacktest.WaitCompleted(t, s, ordinary.Body["execution_id"].(string))
	stop := stacktest.Call(t, "POST", api+"/executions/"+inboxID+"/signals/note", nil, `"stop"`)
	require.Equal(t, 202, stop.Status, stop.Body)
	require.EqualValues(t, 0, stacktest.WaitCompleted(t, s, inboxID)["result"], "no poisoned note reached the inbox")

	// The executions table holds what was meant to be there, and nothing
	// else.
	rows, err := s.DB.Query(context.Background(), `SELECT execution_id::text FROM executions`)
	require.NoError(t, err)
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	want := make([]string, 0, len(stored))
	for id := range stored {
		want = append(want, id)
	}
	slices.Sort(ids)
	slices.Sort(want)
	require.Equal(t, want, ids)
	t.Logf("%d rounds: %d storable documents stored and run, %d refused at each entry point, %d dead letters",
		rounds, len(accepted), rounds, bound)
}

// badIdentifier is a text that storable.CheckIdentifier refuses.
func badIdentifier(rng *rand.Rand) string {
	for {
		if s := poison.Text(rng); storable.CheckIdentifier(s) != nil {
			return s
		}
	}
}

// badKey is an idempotency key that dedup.ValidateKey refuses, trimmed
// of white space (U+0085 included) as it is.
func badKey(rng *rand.Rand) string {
	for {
		if s := badIdentifier(rng); storable.CheckIdentifier(strings.TrimSpace(s)) != nil {
			return s
		}
	}
}

// badText is a text that storable.CheckText refuses: U+0000 or bytes that
// are not UTF-8.
func badText(rng *rand.Rand) string {
	for {
		if s := poison.Text(rng); storable.CheckText(s) != nil {
			return s
		}
	}
}

// badHeaderKey is an idempotency key that can travel in a header (no
// CR, LF or NUL) and that Harvest refuses.
func badHeaderKey(rng *rand.Rand) string {
	return []string{"k\xff", "k\xed\xa0\x80", "evt\t1", "\xc0\xafk"}[rng.IntN(4)] + strconv.Itoa(rng.IntN(1000))
}

// jsonString writes s as a JSON string with its bytes as they are:
// control characters escaped (U+0000 as \u0000), anything else, bytes
// that are not UTF-8 included, raw.
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func show(s string) string {
	if len(s) > 80 {
		return fmt.Sprintf("%q… (%d bytes)", s[:80], len(s))
	}
	return strconv.Quote(s)
}
