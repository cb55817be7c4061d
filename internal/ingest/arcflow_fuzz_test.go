package ingest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/webhook"
)

// FuzzParseRunRequest parses fuzzed ArcFlow run bodies, POST /v1/runs, as
// handleCreateRun does before it checks the start and publishes it:
//   - a body is refused as invalid_json, missing_workflow,
//     invalid_workflow_name or unknown_field, always with 400; in particular a body that is
//     not one JSON value is refused as invalid_json, once the storable
//     check that follows has seen it;
//   - an accepted body names a valid workflow, and, if the storable check
//     passes, its input is absent or storable;
//   - an accepted body, encoded again and parsed again, is the same
//     request.
func FuzzParseRunRequest(f *testing.F) {
	for _, s := range []string{
		`{"workflow": "onboarding"}`, `{"workflow": "onboarding", "input": {"user": 42}}`, `{"workflow": "w", "input": null}`,
		`{"Workflow": "w"}`, `{"workflow": ""}`, `{}`, `null`, ``, ` `, `{"workflow": "a.b"}`, `{"workflow": "w\u0000"}`,
		`{"workflow": "` + strings.Repeat("w", 129) + `"}`, `{"workflow": 1}`, `{"workflow": "w", "input": 1e1000000}`,
		`{"workflow": "w", "input": {"a": "\u0000"}}`, `{"workflow": "w", "input": "\ud800"}`, "{\"workflow\": \"w\", \"input\": \"\xff\"}",
		`{"workflow": "w", "input": ` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,
		`{"workflow": "w"} {}`, `{"workflow": "w"}]`, `{"workflow": "w"}}`, `[]`, `"w"`, `{"workflow": "w", "workflow": "v"}`,
		`{"workflow": "w", "input": 123456789012345678901234567890}`, "\ufeff{\"workflow\": \"w\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, unknown, rej := parseRunRequest(body)
		if rej == nil {
			rej = unknown
		}
		if rej == nil {
			rej = unstorableBody(body, runMembers)
		}
		if rej != nil {
			requireRejection(t, rej)
			require.Equal(t, http.StatusBadRequest, rej.status)
			if !json.Valid(body) {
				require.Equal(t, api.CodeInvalidJSON, rej.body.Error, "body %q: %+v", body, rej.body)
			}
			return
		}
		require.True(t, json.Valid(body), "body %q accepted", body)
		require.NoError(t, dedup.ValidateName(req.Workflow))
		if len(req.Input) > 0 {
			require.NoError(t, storable.CheckJSON(req.Input))
		}

		raw, err := json.Marshal(req)
		require.NoError(t, err)
		again, unknown, rej := parseRunRequest(raw)
		require.Nil(t, rej, "%s is refused: %+v", raw, rej)
		require.Nil(t, unknown, "%s is refused: %+v", raw, unknown)
		require.Nil(t, unstorableBody(raw, runMembers), "%s", raw)
		require.Equal(t, req.Workflow, again.Workflow)
		sameJSON(t, req.Input, again.Input, "input")
	})
}

// FuzzExternalCallback checks an ArcFlow external callback, POST
// /v1/runs/{run_id}/external/{binding_id}, as handleRunExternal does
// before publishing:
//   - the body's verdict is requirePayloadVerdict's, and an accepted
//     payload, sent again, is accepted as itself;
//   - X-Harvest-Signature, made by webhook.SignBound for the callback's
//     method, path and key over the body as sent, verifies under any of
//     the secrets; with a body byte changed, a bit of the signature
//     flipped, another run, binding or key, a timestamp past the
//     tolerance, or computed over the body trimmed when the body is not,
//     it does not;
//   - the legacy X-ArcFlow-Signature, "sha256=" + the hex HMAC of the
//     body alone, verifies only as the legacy scheme, never as a bound
//     signature.
func FuzzExternalCallback(f *testing.F) {
	for _, s := range payloadSeeds {
		f.Add([]byte(s), uint(len(s)))
	}
	f.Add([]byte(` {"approved": true} `), uint(1))
	f.Add([]byte("{\"by\": \"Zoë\"}\r\n"), uint(3))
	f.Add([]byte("1.5"), uint(7))

	secrets := []string{"arcflow-old", "arcflow-new"}
	legacy := arcFlowSource(secrets)
	now := time.Unix(1_700_000_000, 0)
	target := webhook.Target{Method: http.MethodPost, Path: "/v1/runs/" + testExecutionID + "/external/item", IdempotencyKey: "delivery-1"}
	f.Fuzz(func(t *testing.T, body []byte, at uint) {
		if len(body) <= fuzzMaxBody {
			payload, rej := externalPayload(body)
			requirePayloadVerdict(t, body, payload, rej)
			if rej == nil && payload != nil {
				again, rej := externalPayload(payload)
				require.Nil(t, rej)
				require.Equal(t, payload, again)
			}
		}

		secret := secrets[at%uint(len(secrets))]
		bound := func(sig string) http.Header {
			return http.Header{http.CanonicalHeaderKey(webhook.HeaderHarvestSignature): {sig}}
		}
		good := webhook.SignBound(secret, now, target, body)
		require.NoError(t, webhook.VerifyBound(secrets, 0, bound(good), target, body, now), "the callback's own signature")
		refused := func(what string, h http.Header, target webhook.Target, body []byte, now time.Time) {
			t.Helper()
			require.ErrorIs(t, webhook.VerifyBound(secrets, 0, h, target, body, now), webhook.ErrBadSignature, what)
		}
		if len(body) > 0 {
			changed := bytes.Clone(body)
			changed[at%uint(len(body))] ^= 0x01
			refused("a changed body", bound(good), target, changed, now)
		}
		ts, v1, _ := strings.Cut(good, ",v1=")
		sig, err := hex.DecodeString(v1)
		require.NoError(t, err)
		sig[at%uint(len(sig))] ^= 1 << (at % 8)
		refused("a flipped signature bit", bound(ts+",v1="+hex.EncodeToString(sig)), target, body, now)
		other := target
		other.Path = "/v1/runs/" + dedup.NewID() + "/external/item"
		refused("another run", bound(good), other, body, now)
		other = target
		other.Path = strings.TrimSuffix(target.Path, "item") + "approval"
		refused("another binding", bound(good), other, body, now)
		other = target
		other.IdempotencyKey = "delivery-2"
		refused("another key", bound(good), other, body, now)
		refused("a stale timestamp", bound(good), target, body, now.Add(webhook.DefaultTolerance+time.Duration(at%3600+1)*time.Second))
		if trimmed := bytes.TrimSpace(body); len(trimmed) != len(body) {
			refused("signed over the trimmed body", bound(webhook.SignBound(secret, now, target, trimmed)), target, body, now)
		}

		m := hmac.New(sha256.New, []byte(secret))
		m.Write(body)
		old := "sha256=" + hex.EncodeToString(m.Sum(nil))
		_, err = webhook.Verify(legacy, http.Header{http.CanonicalHeaderKey(HeaderArcFlowSignature): {old}}, body, now)
		require.NoError(t, err, "the legacy scheme, where it is configured")
		refused("a body-only signature", http.Header{http.CanonicalHeaderKey(HeaderArcFlowSignature): {old}}, target, body, now)
		refused("a body-only signature as a bound one", bound(old), target, body, now)
	})
}
