package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/callback"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/registry"
	"github.com/harvest-engine/harvest/internal/schema"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/wire"
)

// fuzzMaxBody is the body limit of fuzzServer: small, so that fuzzed
// bodies can cross it.
const fuzzMaxBody = 1 << 12

// fuzzResolver answers without the network: a host under .test resolves to
// a public address, any other host does not exist.
type fuzzResolver struct{}

func (fuzzResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	if strings.HasSuffix(host, ".test") {
		return []net.IPAddr{{IP: net.ParseIP("93.184.216.34")}}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// fuzzServer is a Server that can parse and check requests, and nothing
// else: no NATS, no PostgreSQL, no schemas, every admission gate open,
// no worker; onboarding is declared, and every other workflow unknown.
func fuzzServer() *Server {
	cfg := Config{MaxBodyBytes: fuzzMaxBody, MaxStartDelay: time.Hour, CallbackPolicy: callback.Policy{Resolver: fuzzResolver{}},
		DeclaredWorkflows: []string{"onboarding"}}.withDefaults()
	return &Server{cfg: cfg, log: cfg.Logger,
		admission: newMirror[api.AdmissionGate](nil, cfg.Logger, nil),
		schemas:   newMirror[*schema.Schema](nil, cfg.Logger, nil),
		workers:   registry.NewIndex(noWorkers{}, cfg.Logger), declared: declaredWorkflows(cfg)}
}

// noWorkers is a workers bucket that holds no registration.
type noWorkers struct{ jetstream.KeyValue }

func (noWorkers) Bucket() string { return "HARVEST_WORKERS" }

func (noWorkers) Watch(context.Context, string, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return emptyWatch(), nil
}

// emptyWatch is a watch that has delivered every current value: none.
func emptyWatch() jetstream.KeyWatcher {
	w := emptyWatcher(make(chan jetstream.KeyValueEntry, 1))
	w <- nil
	return w
}

type emptyWatcher chan jetstream.KeyValueEntry

func (w emptyWatcher) Updates() <-chan jetstream.KeyValueEntry { return w }
func (w emptyWatcher) Stop() error                             { return nil }

// fuzzRequest is a POST of body, with an Idempotency-Key header when
// withKey is set.
func fuzzRequest(target string, body []byte, withKey bool, key string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, target, bytes.NewReader(body))
	if withKey {
		r.Header[http.CanonicalHeaderKey("Idempotency-Key")] = []string{key}
	}
	return r
}

// requireRejection checks what every refusal of a request body must be: a
// 4xx with a client error code, and a message that is valid UTF-8
// without raw control characters, fit for a log line.
func requireRejection(t *testing.T, rej *rejection, codes ...string) {
	t.Helper()
	if rej.status == http.StatusNotFound {
		require.Equal(t, api.CodeUnknownWorkflow, rej.body.Error, "%+v", rej.body)
	} else {
		require.Contains(t, []int{http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity}, rej.status, "%+v", rej.body)
	}
	if len(codes) > 0 {
		require.Contains(t, codes, rej.body.Error, "%+v", rej.body)
	}
	require.NotEmpty(t, rej.body.Message)
	require.True(t, utf8.ValidString(rej.body.Message), "message %q is not UTF-8", rej.body.Message)
	require.False(t, strings.ContainsFunc(rej.body.Message, unicode.IsControl), "message %q holds a control character", rej.body.Message)
}

// sameJSON requires two JSON documents to be the same value, or both
// absent: an absent value and null are the same (dedup.Fingerprint).
func sameJSON(t *testing.T, want, got json.RawMessage, what string) {
	t.Helper()
	require.Equal(t, dedup.Fingerprint(want), dedup.Fingerprint(got), "%s: %s became %s", what, want, got)
}

// requireWorkflowID checks the rule for a workflow_id a caller names.
func requireWorkflowID(t *testing.T, id string) {
	t.Helper()
	require.NotEmpty(t, strings.TrimSpace(id), "blank workflow_id %q accepted", id)
	require.LessOrEqual(t, len(id), dedup.MaxWorkflowIDBytes)
	require.NoError(t, storable.CheckIdentifier(id))
}

// FuzzParseStart parses fuzzed start requests (workflow name, body,
// Idempotency-Key header) as POST /api/harvest/workflows/{name}/start does,
// short of publishing:
//   - a request is refused with a key error (wrapping one of dedup's key
//     errors), or with a 4xx rejection, or accepted, never two of these;
//   - a valid Idempotency-Key header is the key, found even when the body
//     is refused (so a replay can be answered), and an invalid one is a
//     key error whatever the body holds;
//   - a body that is not one JSON value is refused as invalid_json;
//   - an accepted start has a valid name, a stable key, a workflow_id
//     that follows the API's rule, a reuse policy Harvest knows and a
//     storable input, and its schedule is the one requested;
//   - an accepted request, encoded again and parsed again, gives the same
//     start.
func FuzzParseStart(f *testing.F) {
	for _, body := range []string{
		``, `{}`, `null`, ` {"input": {"a": [1, "x", true, null]}} `, `{"workflow_id": "order-42", "idempotency_key": " evt_1 "}`,
		`{"input": 1e1000000}`, `{"input": 12345678901234567890123456789}`, `{"input": -0.0e-5}`,
		`{"input": {"s": "\u0000"}}`, `{"input": "\ud800"}`, "{\"input\": \"\xff\"}", "{\"input\": \"a\x00b\"}",
		`{"input": ` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`, `{"input": ` + strings.Repeat(`{"a":`, 100) + `1` + strings.Repeat(`}`, 100) + `}`,
		`{"workflow_id": ""}`, `{"workflow_id": " "}`, `{"workflow_id": "a\nb"}`, `{"workflow_id": "` + strings.Repeat("w", 257) + `"}`,
		`{"Workflow_ID": "x\u0000"}`, `{"workflow_id": "a", "workflow_id": "b"}`, `{"idempotency_key": "k\ud800"}`, `{"idempotency_key": "conn:x"}`,
		`{"idempotency_key": ""}`, `{"reuse_policy": "reject_duplicate"}`, `{"reuse_policy": "sometimes"}`,
		`{"delay": "90s"}`, `{"delay": "-1s"}`, `{"delay": "2h"}`, `{"delay": "9999999999999h"}`, `{"delay": "1s", "start_at": "2026-01-01T00:00:00Z"}`,
		`{"start_at": "2026-01-01T00:00:00Z"}`, `{"start_at": "0001-01-01T00:00:00Z"}`, `{"start_at": "9999-12-31T23:59:59Z"}`, `{"start_at": "tomorrow"}`,
		`{"completion_callback": "https://hooks.test/done"}`, `{"completion_callback": "http://127.0.0.1/x"}`, `{"completion_callback": "ftp://x.test"}`,
		`{"completion_callback": "https://nowhere.example/x"}`, `{} {}`, `{}]`, `{"input": 1}}`, `[]`, `"x"`, `1`, `{"input": 1,}`, "\ufeff{}", "{\"a\":1}\x00",
	} {
		f.Add("onboarding", []byte(body), false, "")
	}
	f.Add("onboarding", []byte(`{"idempotency_key": "body"}`), true, "header")
	f.Add("onboarding", []byte(`not json`), true, "evt_1")
	f.Add("onboarding", []byte(`{}`), true, "")
	f.Add("onboarding", []byte(`{}`), true, "hook:x")
	f.Add("onboarding", []byte(`{}`), true, "k\x00")
	f.Add("", []byte(`{}`), false, "")
	f.Add("a.b", []byte(`{}`), true, "evt_1")
	f.Add("onboarding", bytes.Repeat([]byte(" "), fuzzMaxBody+1), true, "evt_1")

	s := fuzzServer()
	f.Fuzz(func(t *testing.T, name string, body []byte, withKey bool, key string) {
		parse := func(body []byte) (parsedStart, error, *rejection) {
			r := fuzzRequest("/api/harvest/workflows/x/start", body, withKey, key)
			r.SetPathValue("name", name)
			return s.parseStart(httptest.NewRecorder(), r)
		}
		before := time.Now().UTC()
		p, keyErr, rej := parse(body)
		after := time.Now().UTC()

		require.False(t, keyErr != nil && rej != nil, "both a key error and a rejection")
		if withKey {
			headerKey, headerErr := dedup.ValidateKey(key)
			if headerErr != nil {
				require.Error(t, keyErr, "invalid header key %q", key)
				require.Equal(t, headerErr.Error(), keyErr.Error())
			} else {
				require.NoError(t, keyErr)
				require.Equal(t, headerKey, p.key, "the header's key is the key, whatever the body")
			}
		}
		if keyErr != nil {
			require.Nil(t, rej)
			require.True(t, isKeyError(keyErr), "unexpected key error: %v", keyErr)
			return
		}
		if rej != nil {
			requireRejection(t, rej)
			trimmed := bytes.TrimSpace(body)
			if len(body) <= fuzzMaxBody && dedup.ValidateName(name) == nil && len(trimmed) > 0 && !json.Valid(trimmed) {
				require.Equal(t, api.CodeInvalidJSON, rej.body.Error, "body %q: %+v", body, rej.body)
			}
			return
		}

		// Accepted.
		require.Equal(t, name, p.name)
		require.NoError(t, dedup.ValidateName(p.name))
		if p.key != "" {
			again, err := dedup.ValidateKey(p.key)
			require.NoError(t, err)
			require.Equal(t, p.key, again)
		}
		if trimmed := bytes.TrimSpace(body); len(trimmed) > 0 {
			require.True(t, json.Valid(trimmed), "body %q accepted", body)
			require.NoError(t, storable.CheckJSON(trimmed), "body %q accepted", body)
		}
		if p.req.WorkflowID != nil {
			require.Equal(t, *p.req.WorkflowID, p.workflowID)
			requireWorkflowID(t, p.workflowID)
		} else {
			require.Empty(t, p.workflowID)
		}
		require.True(t, wire.ValidReusePolicy(p.req.ReusePolicy))
		if p.req.Input != nil {
			require.NotEmpty(t, p.req.Input)
			require.NoError(t, storable.CheckJSON(p.req.Input))
		}
		switch {
		case p.req.Delay != nil:
			d, err := time.ParseDuration(*p.req.Delay)
			require.NoError(t, err)
			require.True(t, d >= 0 && d <= s.cfg.MaxStartDelay, "delay %s accepted", d)
			require.WithinRange(t, *p.startAt, before.Add(d), after.Add(d))
		case p.req.StartAt != nil:
			at, err := time.Parse(time.RFC3339Nano, *p.req.StartAt)
			require.NoError(t, err)
			require.True(t, at.Equal(*p.startAt), "start_at %s scheduled at %s", at, p.startAt)
			require.Equal(t, time.UTC, p.startAt.Location())
			require.False(t, p.startAt.After(after.Add(s.cfg.MaxStartDelay)), "start_at %s beyond the limit", at)
		default:
			require.Nil(t, p.startAt)
		}

		// Encoded again and parsed again: the same start.
		raw, err := json.Marshal(p.req)
		require.NoError(t, err)
		p2, keyErr, rej := parse(raw)
		require.NoError(t, keyErr, "%s", raw)
		require.Nil(t, rej, "%s is refused: %+v", raw, rej)
		require.Equal(t, p.name, p2.name)
		require.Equal(t, p.key, p2.key)
		require.Equal(t, p.workflowID, p2.workflowID)
		sameJSON(t, p.req.Input, p2.req.Input, "input")
		require.Equal(t, p.startAt == nil, p2.startAt == nil)
		if p.req.StartAt != nil {
			require.True(t, p.startAt.Equal(*p2.startAt))
		}
		p.req.Input, p2.req.Input = nil, nil
		require.Equal(t, p.req, p2.req, "%s", raw)
	})
}

// isKeyError reports whether err wraps one of the errors dedup.ValidateKey
// returns.
func isKeyError(err error) bool {
	for _, k := range []error{dedup.ErrKeyEmpty, dedup.ErrKeyTooLong, dedup.ErrKeyText, dedup.ErrKeyReserved} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}
