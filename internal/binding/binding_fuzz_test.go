package binding_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/binding"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/webhook"
)

// FuzzEvent decodes fuzzed message bodies with a fuzzed event_pointer, or
// a fixed event_type:
//   - every refusal wraps exactly one of ErrInvalidJSON and
//     ErrMissingEventType, and ErrInvalidJSON is reported exactly when the
//     body is not one JSON value (json.Valid);
//   - the event type is the binding's event_type, or else the non-empty
//     string its pointer selects in the event; when the pointer selects
//     no such string, ErrMissingEventType;
//   - the decoded event, encoded again and decoded again, is the same value
//     (numbers keep their digits), so the command built from it carries
//     what was sent.
func FuzzEvent(f *testing.F) {
	for _, s := range []string{
		``, ` `, `{}`, `{"type":"a"}`, `{"type":1}`, `{"type":""}`, `{"type":null}`, `[]`, `"x"`, `{"type":"a"} x`, `{"type":"a"}]`,
		`{"type":"a"} {}`, "\xff", "{\"type\":\"\xff\"}", `{"type":"\u0000"}`, `{"type":"\ud800"}`, `{"type":"a","n":12345678901234567890e300}`,
		`{"meta":{"kind":"k"},"type":"t"}`, `{"a/b":{"~":"x"}}`, strings.Repeat("[", 1000) + strings.Repeat("]", 1000),
		strings.Repeat(`{"type":`, 100) + `"deep"` + strings.Repeat("}", 100), "\ufeff{\"type\":\"a\"}", "\x00",
	} {
		f.Add([]byte(s), "", "")
		f.Add([]byte(s), "/meta/kind", "")
		f.Add([]byte(s), "", "fixed")
	}
	f.Add([]byte(`{"a/b":{"~":"x"}}`), "/a~1b/~0", "")
	f.Add([]byte(`[["x"]]`), "/0/0", "")
	f.Add([]byte(`{"type":"a"}`), "type", "")

	f.Fuzz(func(t *testing.T, body []byte, pointer, eventType string) {
		b := valid()
		b.EventPointer, b.EventType = pointer, eventType
		if b.Validate() != nil {
			return // a configuration Harvest refuses to load
		}
		event, typ, err := b.Event(body)
		if err != nil {
			invalid, missing := errors.Is(err, binding.ErrInvalidJSON), errors.Is(err, binding.ErrMissingEventType)
			require.True(t, invalid != missing, "%v wraps %v of ErrInvalidJSON, %v of ErrMissingEventType", err, invalid, missing)
			require.Equal(t, !json.Valid(body), invalid, "body %q: %v", body, err)
			require.Nil(t, event)
			require.Empty(t, typ)
			if missing {
				require.Empty(t, eventType, "a fixed event type is never missing")
			}
			return
		}
		require.True(t, json.Valid(body), "Event accepts %q, which is not one JSON value", body)
		if eventType != "" {
			require.Equal(t, eventType, typ)
		} else {
			p := b.WithDefaults().EventPointer
			v, err := webhook.Pointer(event, p)
			require.NoError(t, err)
			require.Equal(t, v, typ, "the event type is not what %q selects", p)
			require.NotEmpty(t, typ)
		}

		raw, err := json.Marshal(event)
		require.NoError(t, err)
		again, typAgain, err := b.Event(raw)
		require.NoError(t, err, "the event, encoded again as %s, is refused", raw)
		require.Equal(t, typ, typAgain)
		require.True(t, reflect.DeepEqual(event, again), "%q encodes as %s, which decodes to another value", body, raw)
		raw2, err := json.Marshal(again)
		require.NoError(t, err)
		require.True(t, bytes.Equal(raw, raw2), "encoding is not stable: %s, then %s", raw, raw2)
	})
}

// FuzzMessageKey derives the idempotency key of bound messages from a
// fuzzed binding name, stream sequence and Nats-Msg-Id (bytes the
// publisher chose):
//   - without a Nats-Msg-Id the key is the message's coordinates
//     (dedup.ConnKey), and always usable: within dedup.MaxKeyBytes and
//     storable;
//   - with one, the key is dedup.ConnMsgIDKey of the binding and the id,
//     whatever the sequence, and it is refused exactly when it would be
//     longer than dedup.MaxKeyBytes or the id is not storable text without
//     control characters;
//   - every key is in the reserved "conn:" namespace, which ValidateKey
//     refuses to API callers, so no caller can forge one;
//   - two different ids of one binding never share a key.
func FuzzMessageKey(f *testing.F) {
	f.Add("orders", uint64(42), "evt-1", "evt-2")
	f.Add("orders", uint64(0), "", "evt-1")
	f.Add("b", uint64(1<<63), "conn:6:orders:id:evt-1", "id:evt-1")
	f.Add("orders", uint64(7), "evt\x00", "evt\xff")
	f.Add("orders", uint64(7), "evt\n1", "\u0085")
	f.Add("orders", uint64(7), strings.Repeat("x", dedup.MaxKeyBytes-len("conn:6:orders:id:")), strings.Repeat("x", dedup.MaxKeyBytes))
	f.Add(strings.Repeat("n", dedup.MaxNameBytes), uint64(18446744073709551615), "évt-日本-😀", " ")

	f.Fuzz(func(t *testing.T, name string, seq uint64, id, other string) {
		if dedup.ValidateName(name) != nil {
			return // a binding Harvest refuses to load
		}
		const stream = "ORDERS"
		header := func(id string) nats.Header {
			h := nats.Header{}
			if id != "" {
				h.Set(jetstream.MsgIDHeader, id)
			}
			return h
		}
		reserved := func(key string) {
			t.Helper()
			_, err := dedup.ValidateKey(key)
			require.ErrorIs(t, err, dedup.ErrKeyReserved, "key %q is open to API callers", key)
		}

		key, err := binding.MessageKey(name, stream, seq, header(""))
		require.NoError(t, err)
		require.Equal(t, dedup.ConnKey(name, stream, seq), key)
		require.LessOrEqual(t, len(key), dedup.MaxKeyBytes)
		require.NoError(t, storable.CheckIdentifier(key))
		reserved(key)

		key, err = binding.MessageKey(name, stream, seq, header(id))
		if id == "" {
			require.NoError(t, err)
			return
		}
		want := dedup.ConnMsgIDKey(name, id)
		usable := len(want) <= dedup.MaxKeyBytes && storable.CheckIdentifier(id) == nil
		if !usable {
			require.Error(t, err, "Nats-Msg-Id %q makes key %q", id, key)
			require.Empty(t, key)
			return
		}
		require.NoError(t, err, "Nats-Msg-Id %q", id)
		require.Equal(t, want, key)
		reserved(key)
		elsewhere, err := binding.MessageKey(name, stream, seq+1, header(id))
		require.NoError(t, err)
		require.Equal(t, key, elsewhere, "a redelivery at another sequence changes the key")

		if otherKey, err := binding.MessageKey(name, stream, seq, header(other)); err == nil && other != "" {
			require.Equal(t, id == other, key == otherKey, "ids %q and %q: keys %q and %q", id, other, key, otherKey)
		}
	})
}
