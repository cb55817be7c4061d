package ingest

import (
	"fmt"
	"net/http"

	"github.com/google/uuid"

	"github.com/harvest-engine/harvest/api"
)

// An execution id has one form everywhere past ingest: 36 characters,
// lower-case hex digits with hyphens (0199a3e4-7c4b-7d1a-9c2e-5b6f7a8b9c0d),
// as the scheduler mints it and the API answers it. The scheduler, the
// stores and the outcome subjects compare ids as strings, so an id in
// another spelling would name no execution there; ingest takes the same
// 36 characters in any letter case and refuses every other spelling
// before it reads or publishes anything.

// canonicalExecutionID returns raw as an execution id in its canonical
// form: raw must be a UUID in its 36-character form, in any letter case.
// The other spellings uuid.Parse takes (urn:uuid:, braces, 32 hex digits)
// are refused, as is anything that is not a UUID.
func canonicalExecutionID(raw string) (string, error) {
	id, err := uuid.Parse(raw)
	switch {
	case err != nil:
		return "", fmt.Errorf("execution id %q is not a UUID: want 36 characters, such as 0199a3e4-7c4b-7d1a-9c2e-5b6f7a8b9c0d", shownName(raw))
	case len(raw) != 36:
		return "", fmt.Errorf("execution id %q: want the UUID's 36-character form, %s", shownName(raw), id)
	}
	return id.String(), nil
}

// pathExecutionID reads the execution id of r's path parameter param in
// its canonical form; it answers 400 invalid_execution_id, field param,
// and reports false when the id has another form.
func pathExecutionID(w http.ResponseWriter, r *http.Request, param string) (string, bool) {
	id, err := canonicalExecutionID(r.PathValue(param))
	if err != nil {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidExecutionID, param, err.Error())
		return "", false
	}
	return id, true
}
