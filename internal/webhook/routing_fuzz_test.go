package webhook_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/webhook"
	"github.com/harvest-engine/harvest/internal/wire"
)

// decodeEvent decodes a delivery's body as ingest and the NATS bindings
// do: one JSON value, numbers kept as written.
func decodeEvent(raw []byte) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil, false
	}
	return v, true
}

// pathTo walks doc along path (each byte picks a member, in key order, or
// an element) and returns the node reached and the RFC 6901 pointer to it.
func pathTo(doc any, path []byte) (node any, ptr string) {
	node = doc
	for _, c := range path {
		switch v := node.(type) {
		case map[string]any:
			if len(v) == 0 {
				return node, ptr
			}
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			k := keys[int(c)%len(keys)]
			node, ptr = v[k], ptr+"/"+escapeToken(k)
		case []any:
			if len(v) == 0 {
				return node, ptr
			}
			i := int(c) % len(v)
			node, ptr = v[i], ptr+"/"+strconv.Itoa(i)
		default:
			return node, ptr
		}
	}
	return node, ptr
}

// FuzzExpand checks workflow_id templates against the event they
// are rendered from:
//   - a template without '{' renders as itself;
//   - "<before>{<pointer>}<after>", the pointer built from a path into
//     the event, renders as before, the selected string or number as
//     written, and after; any other value is refused;
//   - any template renders the same way every time, and a refusal is an
//     unclosed '{', a pointer that selects nothing (wrapping ErrPointer)
//     or a value that is neither a string nor a number.
//
// A pointer holding '}' cannot be written in a template (the placeholder
// ends at the first '}'), so paths through such keys are not tried.
func FuzzExpand(f *testing.F) {
	f.Add(`{"data": {"object": {"id": "pi_1", "amount": 500}}}`, "order-", "", []byte{0, 0, 1}, "order-{/data/object/id}")
	f.Add(`{"a": {"b": "c"}}`, "x-", "-y", []byte{0, 0}, "x-{/a/b}")
	f.Add(`[1, 2]`, "", "}", []byte{1}, "{/1}{")
	f.Add(`{"n": 12345678901234567890123, "f": -0.5e-3, "z": 1E+2}`, "n", "", []byte{1}, "{/n}-{/f}-{/z}")
	f.Add(`{"": {"~/": "odd"}}`, "{", "{", []byte{0, 0}, "{/~0~1}")
	f.Add(`{"a}b": "x", "a": "y"}`, "", "", []byte{1}, "{/a}b}")
	f.Add(`{"s": "\u0000\ud800\n"}`, "", "", []byte{0}, "{/s}")
	f.Add(`{"o": {"k": null}, "t": true}`, "", "", []byte{0}, "{/o}{/t}")
	f.Add(strings.Repeat(`{"a":`, 200)+`"deep"`+strings.Repeat("}", 200), "", "", bytes.Repeat([]byte{0}, 200), "{}")
	f.Add(`"scalar"`, "", "", []byte{}, "{}")
	f.Add(`{"a": "b"}`, "", "", []byte{}, "{a}")

	f.Fuzz(func(t *testing.T, raw, before, after string, path []byte, template string) {
		doc, ok := decodeEvent([]byte(raw))
		if !ok {
			return
		}
		before, after = strings.ReplaceAll(before, "{", ""), strings.ReplaceAll(after, "{", "")

		got, err := webhook.Expand(doc, before)
		require.NoError(t, err, "template %q has no placeholder", before)
		require.Equal(t, before, got)

		if node, ptr := pathTo(doc, path); !strings.Contains(ptr, "}") {
			got, err := webhook.Expand(doc, before+"{"+ptr+"}"+after)
			switch v := node.(type) {
			case string:
				require.NoError(t, err)
				require.Equal(t, before+v+after, got)
			case json.Number:
				require.NoError(t, err)
				require.Equal(t, before+v.String()+after, got)
			default:
				require.ErrorContains(t, err, "selects neither a string nor a number", "pointer %q selects a %T", ptr, node)
				require.Empty(t, got)
			}
		}

		got, err = webhook.Expand(doc, template)
		again, err2 := webhook.Expand(doc, template)
		require.Equal(t, got, again)
		require.Equal(t, err == nil, err2 == nil)
		if err == nil {
			if !strings.Contains(template, "{") {
				require.Equal(t, template, got)
			}
			return
		}
		require.Empty(t, got)
		require.True(t, errors.Is(err, webhook.ErrPointer) || strings.Contains(err.Error(), "unclosed {") ||
			strings.Contains(err.Error(), "selects neither a string nor a number"), "unexpected error: %v", err)
	})
}

// workflowIDAllowed is the rule the API applies to a workflow_id a caller
// sends (ingest's start and signal-with-start): 1 to 256 bytes, not blank,
// and text storable.CheckIdentifier accepts.
func workflowIDAllowed(id string) bool {
	return strings.TrimSpace(id) != "" && len(id) <= dedup.MaxWorkflowIDBytes && storable.CheckIdentifier(id) == nil
}

// FuzzRuleCommand evaluates routing rules, start and signal-with-start,
// with fuzzed input pointers and workflow_id templates, on fuzzed events:
//   - a command is made only when the input pointer selects something, and
//     its input (or signal payload) is that value: decoded again it is the
//     same value, and it is storable whenever the event was;
//   - a start is keyed by the delivery: its command id is derived from the
//     workflow and the key, its fingerprint from its input, and the
//     workflow_id it mints routes to the shard it is sent to;
//   - a signal-with-start's workflow_id is the template rendered on the
//     event and satisfies the rules the API applies to workflow_ids
//     (workflowIDAllowed), or the command is refused; its command id and
//     shard follow from the workflow_id;
//   - evaluating the rule again makes the same command (a minted workflow_id
//     aside), so a redelivery collapses into the first;
//   - a refusal makes no command.
func FuzzRuleCommand(f *testing.F) {
	stripe := `{"id": "evt_1", "type": "payment_intent.succeeded", "data": {"object": {"id": "pi_1", "amount": 2000, "metadata": {"order": "o-7"}}}}`
	f.Add(stripe, "/data/object", "", "", uint8(4))
	f.Add(stripe, "", "paid", "order-{/data/object/metadata/order}", uint8(1))
	f.Add(stripe, "/data", "paid", "pi-{/data/object/id}-{/data/object/amount}", uint8(0))
	f.Add(stripe, "/nope", "paid", "{/id}", uint8(3))
	f.Add(stripe, "", "paid", "{/data/object/missing}", uint8(3))
	f.Add(`{"id": "a\nb"}`, "", "s", "order-{/id}", uint8(7))
	f.Add(`{"id": "x", "n": 1e400, "s": "\u0000"}`, "/n", "s", "{/id}", uint8(2))
	f.Add(`{"id": "x", "big": 123456789012345678901234567890}`, "/big", "s", "{/big}", uint8(2))
	f.Add(`{"id": "\u00e9\ud83d\ude00 <&>"}`, "/id", "s", "{/id}", uint8(9))
	f.Add(`[{"id": "first"}, {"id": "second"}]`, "/1", "s", "{/0/id}+{/1/id}", uint8(15))
	f.Add(strings.Repeat("[", 100)+`"x"`+strings.Repeat("]", 100), "", "s", "fixed", uint8(5))
	f.Add(`{"id": "x"}`, "", "s", "{/id", uint8(1))

	now := time.Unix(1_700_000_000, 0).UTC()
	f.Fuzz(func(t *testing.T, raw, inputPointer, signal, template string, shards uint8) {
		event, ok := decodeEvent([]byte(raw))
		if !ok {
			return
		}
		rule := webhook.Rule{Event: "e", Workflow: "w", InputPointer: inputPointer, Signal: signal, WorkflowID: template}
		if (webhook.Endpoint{Source: webhook.Source{Name: "src", Kind: webhook.KindNone, AllowUnsigned: true}, Rules: []webhook.Rule{rule}}).Validate() != nil {
			return // a configuration Harvest refuses to load
		}
		n := int(shards)%16 + 1
		key := dedup.HookKey("src", "evt_1")
		storableEvent := storable.CheckJSON([]byte(raw)) == nil

		cmd, shard, err := rule.Command(placement.Single(n), "", key, event, now)
		if err != nil {
			require.Nil(t, cmd, "a refused rule made a command")
			return
		}
		require.GreaterOrEqual(t, shard, 0)
		require.Less(t, shard, n)
		selected, err := webhook.Pointer(event, inputPointer)
		require.NoError(t, err, "a command whose input pointer %q selects nothing", inputPointer)

		// The value sent is the value selected, and stays storable.
		sameValue := func(what string, sent json.RawMessage) {
			t.Helper()
			back, ok := decodeEvent(sent)
			require.True(t, ok, "%s %s is not JSON", what, sent)
			require.True(t, reflect.DeepEqual(selected, back), "%s %s is not the value %q selects", what, sent, inputPointer)
			if storableEvent {
				require.NoError(t, storable.CheckJSON(sent), "%s %s, cut from a storable event, is unstorable", what, sent)
			}
		}

		again, againShard, err := rule.Command(placement.Single(n), "", key, event, now)
		require.NoError(t, err, "the same event is refused the second time")
		require.Equal(t, shard, againShard)
		require.Equal(t, wire.DefaultTaskQueue, cmd.Start.TaskQueue, "a workflow with no configured task queue starts on the default one")

		if signal == "" {
			require.Equal(t, wire.KindStart, cmd.Kind)
			require.Equal(t, "w", cmd.Start.WorkflowName)
			require.Equal(t, dedup.StartCommandID("w", key), cmd.CommandID)
			require.Equal(t, key, cmd.Start.IdempotencyKey)
			require.Equal(t, dedup.Fingerprint(cmd.Start.Input), cmd.Start.Fingerprint)
			require.True(t, cmd.Start.WorkflowIDMinted)
			require.Equal(t, shard, placement.StartShard(n, "w", cmd.Start.WorkflowID, ""), "the minted workflow_id routes elsewhere")
			require.Equal(t, shard, placement.StartShard(n, "w", "", key))
			sameValue("input", cmd.Start.Input)
			again.Start.WorkflowID = cmd.Start.WorkflowID
			require.Equal(t, cmd, again)
			return
		}
		require.Equal(t, wire.KindSignalWithStart, cmd.Kind)
		require.True(t, cmd.SignalWithStart)
		id := cmd.Start.WorkflowID
		rendered, err := webhook.Expand(event, template)
		require.NoError(t, err)
		require.Equal(t, rendered, id)
		require.True(t, workflowIDAllowed(id), "template %q renders workflow_id %q (%d bytes), which the API refuses", template, id, len(id))
		require.Equal(t, dedup.SignalWithStartCommandID("w", id, key), cmd.CommandID)
		require.Equal(t, placement.StartShard(n, "w", id, ""), shard)
		require.Equal(t, signal, cmd.Signal.SignalName)
		require.Equal(t, key, cmd.Signal.IdempotencyKey)
		sameValue("signal payload", cmd.Signal.Payload)
		require.Equal(t, cmd, again)
	})
}
