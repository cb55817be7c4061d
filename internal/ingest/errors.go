package ingest

import (
	"encoding/json"
	"net/http"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/schema"
)

// Every answer is one of package api's wire types, encoded by writeJSON;
// an error answer is an api.ErrorResponse whose code is one of the
// api.Code constants.

// writeJSON answers status with body encoded as JSON.
func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// writeAnswer answers status with body, adding Retry-After: 1 to a 503
// that carries none yet: a 503 always asks the caller to retry.
func writeAnswer(w http.ResponseWriter, status int, body any) {
	if status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, body)
}

// writeError answers status with the error code and message.
func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, api.ErrorResponse{Error: code, Message: message})
}

// writeFieldError answers status with the error code and message about
// the request field named field.
func writeFieldError(w http.ResponseWriter, status int, code, field, message string) {
	writeJSON(w, status, api.ErrorResponse{Error: code, Message: message, Field: field})
}

// violationsOf is how the violations of a schema are sent.
func violationsOf(vs []schema.Violation) []api.Violation {
	out := make([]api.Violation, len(vs))
	for i, v := range vs {
		out[i] = api.Violation(v)
	}
	return out
}
