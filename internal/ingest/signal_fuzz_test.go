package ingest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/wire"
)

// requirePayloadVerdict checks the verdict on a body that is one JSON
// payload (a signal's, an external callback's), named field: blank is no
// payload; a body that is not one JSON value is refused as invalid_json;
// one PostgreSQL cannot store as payload_unstorable, with the JSON Pointer
// of the offending value; anything else is the payload, the body trimmed.
func requirePayloadVerdict(t *testing.T, body []byte, payload json.RawMessage, rej *rejection) {
	t.Helper()
	trimmed := bytes.TrimSpace(body)
	if len(body) > fuzzMaxBody {
		require.NotNil(t, rej)
		require.Equal(t, http.StatusRequestEntityTooLarge, rej.status)
		require.Equal(t, api.CodePayloadTooLarge, rej.body.Error)
		return
	}
	switch {
	case len(trimmed) == 0:
		require.Nil(t, rej)
		require.Nil(t, payload, "a blank body is no payload")
	case !json.Valid(trimmed):
		require.NotNil(t, rej, "%q accepted", body)
		requireRejection(t, rej, api.CodeInvalidJSON)
		require.Nil(t, payload)
	default:
		err := storable.CheckJSON(trimmed)
		if err == nil {
			require.Nil(t, rej, "%q refused", body)
			require.Equal(t, json.RawMessage(trimmed), payload)
			return
		}
		require.NotNil(t, rej, "%q accepted: %v", body, err)
		requireRejection(t, rej, api.CodePayloadUnstorable)
		var se *storable.Error
		require.ErrorAs(t, err, &se)
		require.Equal(t, se.Pointer, rej.body.Pointer)
		require.Equal(t, "payload", rej.body.Field)
		require.Nil(t, payload)
	}
}

// payloadSeeds are bodies for the payload fuzzers: valid, unstorable and
// not JSON.
var payloadSeeds = []string{
	``, ` `, "\t\r\n", `null`, `{}`, `[]`, `"x"`, `0`, `-0`, `{"sku": "a-1", "qty": 2}`, ` {"a": [1, {"b": null}]} `,
	`{"sku": "\u0000"}`, "{\"sku\": \"a\x00b\"}", `"\ud800"`, `["\udc00\ud800"]`, "\"\xff\"", "\"\xed\xa0\x80\"", `{"a\u0000": 1}`,
	`1e1000000`, `[1e40000, 1e40000]`, `-1e-99999`, `123456789012345678901234567890`, `1e-16383`, `1.7976931348623157e308`,
	strings.Repeat("[", 513) + strings.Repeat("]", 513), strings.Repeat("[", 512) + strings.Repeat("]", 512),
	strings.Repeat(`{"a":`, 300) + `1` + strings.Repeat(`}`, 300),
	`{} {}`, `{}]`, `{"a": 1,}`, `nul`, `'x'`, "\ufeff{}", "{}\x00", `{"a": "b`, `[1, 2`, "\x00",
}

// FuzzSignalPayload reads fuzzed signal bodies, with an idempotency key
// in the Idempotency-Key header or the idempotency_key query parameter,
// as POST /api/harvest/executions/{execution_id}/signals/{name} does
// before publishing:
//   - the body's verdict is requirePayloadVerdict's;
//   - an accepted payload, sent again, is accepted as itself;
//   - the key is the header's, else the query parameter's, validated by
//     dedup.ValidateKey; the header wins even when invalid.
func FuzzSignalPayload(f *testing.F) {
	for _, s := range payloadSeeds {
		f.Add([]byte(s), false, "", false, "")
	}
	f.Add([]byte(`{}`), true, "evt_1", false, "")
	f.Add([]byte(`{}`), false, "", true, "evt_1")
	f.Add([]byte(`{}`), true, "evt\xff", true, "evt_1")
	f.Add([]byte(`{}`), true, "evt_1", true, "evt\x00")
	f.Add([]byte(`{}`), false, "", true, "")
	f.Add([]byte(`{}`), false, "", true, "a&idempotency_key=b;c")
	f.Add(bytes.Repeat([]byte(" "), fuzzMaxBody+1), false, "", false, "")

	s := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte, withHeader bool, header string, withQuery bool, query string) {
		target := "/api/harvest/executions/x/signals/y"
		if withQuery {
			target += "?" + url.Values{"idempotency_key": {query}}.Encode()
		}
		r := fuzzRequest(target, body, withHeader, header)
		payload, rej := s.readSignalPayload(httptest.NewRecorder(), r)
		requirePayloadVerdict(t, body, payload, rej)
		if rej == nil && payload != nil {
			again, rej := s.readSignalPayload(httptest.NewRecorder(), fuzzRequest(target, payload, false, ""))
			require.Nil(t, rej)
			require.Equal(t, payload, again)
		}

		key, err := signalKey(r)
		var want string
		var wantErr error
		switch {
		case withHeader:
			want, wantErr = dedup.ValidateKey(header)
		case withQuery:
			want, wantErr = dedup.ValidateKey(query)
		}
		if wantErr != nil {
			require.Error(t, err)
			require.Equal(t, wantErr.Error(), err.Error())
			return
		}
		require.NoError(t, err)
		require.Equal(t, want, key)
	})
}

// FuzzParseSignalWithStart parses fuzzed signal-with-start bodies, with or
// without an Idempotency-Key header, as POST
// /api/harvest/workflows/{name}/signal-with-start does before publishing:
//   - a refusal is a 4xx with a client error code, and a body that is not
//     one JSON value is refused as invalid_json;
//   - an accepted request names a workflow_id that follows the API's rule
//     and a valid signal name, has a reuse policy Harvest knows, input and
//     signal payload that are absent or storable, and its key is the
//     header's (or else the body's) validated by dedup.ValidateKey;
//   - an accepted request, encoded again and parsed again, gives the same
//     request and key.
func FuzzParseSignalWithStart(f *testing.F) {
	for _, body := range []string{
		`{"workflow_id": "order-1", "signal_name": "item"}`, `{"workflow_id": "order-1", "signal_name": "item", "signal_payload": {"sku": "a"}, "input": [1]}`,
		`{"workflow_id": "o", "signal_name": "item", "idempotency_key": " evt_1 ", "reuse_policy": "reject_duplicate"}`,
		`{"workflow_id": "o", "signal_name": "item", "input": null, "signal_payload": null}`,
		`{"workflow_id": "o\u0000", "signal_name": "item"}`, `{"workflow_id": " ", "signal_name": "item"}`, `{"workflow_id": "o\u007f", "signal_name": "item"}`,
		`{"workflow_id": "` + strings.Repeat("w", 257) + `", "signal_name": "item"}`, `{"workflow_id": "o", "signal_name": "it.em"}`,
		`{"workflow_id": "o", "signal_name": "item\udc00"}`, `{"workflow_id": "o", "signal_name": "item", "signal_payload": {"n": -1e-99999}}`,
		`{"workflow_id": "o", "signal_name": "item", "input": ["\ud800\ud800"]}`, `{"workflow_id": "o", "signal_name": "item", "idempotency_key": "\u0000"}`,
		`{"workflow_id": "o", "signal_name": "item", "reuse_policy": "never"}`, `{"WORKFLOW_ID": "o", "Signal_Name": "item"}`,
		`{"workflow_id": 7, "signal_name": "item"}`, `{"signal_name": "item"}`, `{}`, `null`, ``, `[]`, `{"workflow_id": "o", "signal_name": "item"}]`,
		`{"workflow_id": "o", "signal_name": "item", "input": ` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,
	} {
		f.Add([]byte(body), false, "")
	}
	f.Add([]byte(`{"workflow_id": "o", "signal_name": "item", "idempotency_key": "body"}`), true, "header")
	f.Add([]byte(`{"workflow_id": "o", "signal_name": "item"}`), true, "conn:1")
	f.Add([]byte(`{"workflow_id": "o", "signal_name": "item"}`), true, "")

	s := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte, withKey bool, key string) {
		parse := func(body []byte) (api.SignalWithStartRequest, string, *rejection) {
			return s.parseSignalWithStart(httptest.NewRecorder(), fuzzRequest("/api/harvest/workflows/w/signal-with-start", body, withKey, key))
		}
		req, gotKey, rej := parse(body)
		if rej != nil {
			requireRejection(t, rej)
			require.Empty(t, gotKey)
			if trimmed := bytes.TrimSpace(body); len(body) <= fuzzMaxBody && len(trimmed) > 0 && !json.Valid(trimmed) {
				require.Equal(t, api.CodeInvalidJSON, rej.body.Error, "body %q: %+v", body, rej.body)
			}
			return
		}
		require.NotNil(t, req.WorkflowID)
		requireWorkflowID(t, *req.WorkflowID)
		require.NoError(t, dedup.ValidateName(req.SignalName))
		require.True(t, wire.ValidReusePolicy(req.ReusePolicy))
		for _, v := range []json.RawMessage{req.Input, req.SignalPayload} {
			if v != nil {
				require.NotEmpty(t, v)
				require.NoError(t, storable.CheckJSON(v))
			}
		}
		switch {
		case withKey:
			want, err := dedup.ValidateKey(key)
			require.NoError(t, err, "header key %q refused, request accepted", key)
			require.Equal(t, want, gotKey)
		case req.IdempotencyKey != nil:
			want, err := dedup.ValidateKey(*req.IdempotencyKey)
			require.NoError(t, err)
			require.Equal(t, want, gotKey)
		default:
			require.Empty(t, gotKey)
		}

		raw, err := json.Marshal(req)
		require.NoError(t, err)
		req2, key2, rej := parse(raw)
		require.Nil(t, rej, "%s is refused: %+v", raw, rej)
		require.Equal(t, gotKey, key2)
		sameJSON(t, req.Input, req2.Input, "input")
		sameJSON(t, req.SignalPayload, req2.SignalPayload, "signal_payload")
		req.Input, req2.Input, req.SignalPayload, req2.SignalPayload = nil, nil, nil, nil
		require.Equal(t, req, req2, "%s", raw)
	})
}

// FuzzUnstorableBody checks how a request body PostgreSQL cannot store is
// refused, with a start's members:
//   - a body is refused exactly when storable.CheckJSON refuses it, and a
//     body that is not one JSON value is refused as invalid_json, whatever
//     else it holds;
//   - otherwise the answer carries the offending value's pointer; its
//     field is the top-level member holding it: a start's string member,
//     matched without regard to case as encoding/json matches it, is named
//     as the API names it and gets its own code; any other member is
//     named as sent, with payload_unstorable;
//   - splitPointer cuts the pointer into that member and the rest, so
//     that escaping the member again gives the pointer back.
func FuzzUnstorableBody(f *testing.F) {
	for _, s := range payloadSeeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		`{"workflow_id": "a\u0000"}`, `{"Workflow_ID": "a\u0000"}`, `{"WORKFLOW_ID": ["\ud800"]}`, `{"idempotency_key": "\udfff"}`,
		`{"delay": "1s\u0000"}`, `{"start_at": "\ud800"}`, `{"reuse_policy": "\u0000"}`, `{"completion_callback": "\u0000"}`,
		`{"input": {"a/b": {"~": "\u0000"}}}`, `{"a/b~": "\u0000"}`, `{"\u017fignal": "\u0000"}`, `{"\u212aey": "\u0000"}`,
		`{"input": 1, "note": "\ud800"}`, `{"in\u0000put": 1}`, `{"input": [1, 2, "\u0000"]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		err := storable.CheckJSON(body)
		rej := unstorableBody(body, startMembers)
		if err == nil {
			require.Nil(t, rej, "%q refused: %+v", body, rej)
			return
		}
		require.NotNil(t, rej, "%q accepted: %v", body, err)
		requireRejection(t, rej)
		var se *storable.Error
		require.ErrorAs(t, err, &se)
		if se.Problem == storable.ProblemSyntax || !json.Valid(body) {
			require.Equal(t, api.CodeInvalidJSON, rej.body.Error, "%q", body)
			return
		}
		require.Equal(t, se.Pointer, rej.body.Pointer)
		member, rest := splitPointer(se.Pointer)
		if se.Pointer != "" {
			require.Equal(t, se.Pointer, "/"+escapePointerToken(member)+rest)
		}
		code, named := api.CodePayloadUnstorable, member
		for name, c := range startMembers {
			if strings.EqualFold(name, member) {
				code, named = c, name
			}
		}
		require.Equal(t, code, rej.body.Error, "%q", body)
		require.Equal(t, named, rej.body.Field)
	})
}

// escapePointerToken is RFC 6901's encoding of one reference token.
func escapePointerToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
