package ingest

import (
	"encoding/json"
	"net/http"

	"github.com/harvest-engine/harvest/internal/schema"
)

// apiError is the JSON body of every error answer.
type apiError struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	Limit   int64  `json:"limit,omitempty"`
	// Pointer is the JSON Pointer, within the request body, of a value
	// that cannot be stored.
	Pointer string `json:"pointer,omitempty"`
	// Violations lists what is wrong with an input that fails its schema.
	Violations []schema.Violation `json:"violations,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, apiError{Error: code, Message: message})
}

func writeFieldError(w http.ResponseWriter, status int, code, field, message string) {
	writeJSON(w, status, apiError{Error: code, Message: message, Field: field})
}
