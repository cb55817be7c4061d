package ingest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/storable"
)

// Refusing what PostgreSQL cannot store, before anything is published: a
// command whose payload or identifier PostgreSQL refuses would stop its
// shard. Every JSON body is checked whole with storable.CheckJSON; a
// problem is reported at the top-level member it lies in.

// The string members of request bodies, by the code their refusal gets;
// any other member is a payload (payload_unstorable).
var (
	startMembers = map[string]string{
		"workflow_id": api.CodeInvalidWorkflowID, "idempotency_key": api.CodeInvalidIdempotencyKey, "reuse_policy": api.CodeInvalidReusePolicy,
		"delay": api.CodeInvalidDelay, "start_at": api.CodeInvalidStartAt, "completion_callback": api.CodeInvalidCompletionCallback,
		"start_policy": api.CodeInvalidStartPolicy, "store": api.CodeInvalidStore, "task_queue": api.CodeInvalidTaskQueue,
		"versioning": api.CodeInvalidVersioning, "build_id": api.CodeInvalidBuild,
	}
	signalWithStartMembers = map[string]string{
		"workflow_id": api.CodeInvalidWorkflowID, "idempotency_key": api.CodeInvalidIdempotencyKey, "reuse_policy": api.CodeInvalidReusePolicy,
		"signal_name": api.CodeInvalidSignalName, "task_queue": api.CodeInvalidTaskQueue,
		"versioning": api.CodeInvalidVersioning, "build_id": api.CodeInvalidBuild,
	}
	runMembers   = map[string]string{"workflow": api.CodeInvalidWorkflowName}
	closeMembers = map[string]string{"reason": api.CodeInvalidReason}
)

// unstorableBody checks a request body, a JSON object, and refuses it if
// it holds what PostgreSQL cannot store: a string member listed in
// members gets its code, any other member payload_unstorable; the field
// is the member, the pointer the offending value's.
func unstorableBody(body []byte, members map[string]string) *rejection {
	se, rej := checkStorable(body)
	if se == nil {
		return rej
	}
	member, rest := splitPointer(se.Pointer)
	code := api.CodePayloadUnstorable
	for name, c := range members {
		// encoding/json matches member names without regard to case.
		if strings.EqualFold(name, member) {
			member, code = name, c
			break
		}
	}
	return unstorableRejection(se, code, member, rest)
}

// unstorablePayload checks a body that is one JSON payload, named field.
func unstorablePayload(body []byte, field string) *rejection {
	se, rej := checkStorable(body)
	if se == nil {
		return rej
	}
	return unstorableRejection(se, api.CodePayloadUnstorable, field, se.Pointer)
}

// unstorableRejection is the 400 that refuses se, found in field at the
// pointer rest within it: "input at /a/b: string holds U+0000 (\u0000),
// which Harvest cannot store".
func unstorableRejection(se *storable.Error, code, field, rest string) *rejection {
	rej := reject(http.StatusBadRequest, code, field, describe(field, rest, se))
	rej.body.Pointer = se.Pointer
	return rej
}

func describe(field, rest string, se *storable.Error) string {
	what := *se
	what.Pointer = ""
	if field == "" {
		field = "the body"
	}
	if rest == "" {
		return fmt.Sprintf("%s: %v", storable.DisplayPointer(field), &what)
	}
	return fmt.Sprintf("%s at %s: %v", storable.DisplayPointer(field), storable.DisplayPointer(rest), &what)
}

// unstorableKey is the error of a start body's idempotency_key when it
// cannot be stored (and no header key overrides it): a bad key is refused
// as such, never replayed. encoding/json decodes some such keys silently
// (a lone surrogate as U+FFFD), so the key is checked as sent.
func unstorableKey(body []byte) error {
	var k struct {
		IdempotencyKey json.RawMessage `json:"idempotency_key"`
	}
	if json.Unmarshal(body, &k) != nil || len(k.IdempotencyKey) == 0 {
		return nil
	}
	if err := storable.CheckJSON(k.IdempotencyKey); err != nil {
		return keyTextError(err)
	}
	return nil
}

// keyTextError is the error of a body's idempotency_key that PostgreSQL
// cannot store, as dedup.ValidateKey words it.
func keyTextError(err error) error {
	var se *storable.Error
	if errors.As(err, &se) {
		what := *se
		what.Pointer = ""
		err = &what
	}
	return fmt.Errorf("%w: %w", dedup.ErrKeyText, err)
}

// splitPointer splits a JSON Pointer into its first reference token,
// decoded, and the pointer of the rest.
func splitPointer(p string) (first, rest string) {
	if p == "" {
		return "", ""
	}
	first, rest = p[1:], ""
	if i := strings.IndexByte(first, '/'); i >= 0 {
		first, rest = first[:i], first[i:]
	}
	return strings.ReplaceAll(strings.ReplaceAll(first, "~1", "/"), "~0", "~"), rest
}

// checkStorable checks a JSON body: nil, nil when PostgreSQL can store it;
// the violation; or, for a body that is not one JSON value, its
// rejection, invalid_json, even when the check finds something
// unstorable before the point where the body stops being JSON (a webhook's
// body is decoded without a look past its value).
func checkStorable(body []byte) (*storable.Error, *rejection) {
	err := storable.CheckJSON(body)
	if err == nil {
		return nil, nil
	}
	var se *storable.Error
	isSE := errors.As(err, &se)
	if !isSE || se.Problem == storable.ProblemSyntax || !json.Valid(body) {
		msg := "request body is not one JSON value"
		if isSE && se.Problem == storable.ProblemSyntax {
			msg = "request body: " + err.Error()
		}
		return nil, reject(http.StatusBadRequest, api.CodeInvalidJSON, "", msg)
	}
	return se, nil
}
