package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/harvest-engine/harvest/client"
)

// readBody reads a request body up to MaxBodyBytes, trimmed of white
// space.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *rejection) {
	body, rej := readRaw(w, r, s.cfg.MaxBodyBytes)
	return bytes.TrimSpace(body), rej
}

// readRaw reads a request body, as sent, up to limit bytes.
func readRaw(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *rejection) {
	tooLarge := func() *rejection {
		rej := reject(http.StatusRequestEntityTooLarge, client.CodePayloadTooLarge, "", fmt.Sprintf("request body exceeds %d bytes", limit))
		rej.body.Limit = limit
		return rej
	}
	if r.ContentLength > limit {
		// Refused unread; the server closes the connection rather than
		// read the rest.
		w.Header().Set("Connection", "close")
		return nil, tooLarge()
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, tooLarge()
		}
		return nil, reject(http.StatusBadRequest, client.CodeUnreadableBody, "", err.Error())
	}
	return body, nil
}

// atEnd reports whether dec, having decoded a value, has nothing but white
// space left. (dec.More is no such test: it is false before a stray ']'
// or '}'.)
func atEnd(dec *json.Decoder) bool {
	_, err := dec.Token()
	return errors.Is(err, io.EOF)
}

// readPayload reads a signal's JSON payload; an empty body is null.
func (s *Server) readPayload(w http.ResponseWriter, r *http.Request) (json.RawMessage, *rejection) {
	body, rej := s.readBody(w, r)
	if rej != nil {
		return nil, rej
	}
	if len(body) == 0 {
		return nil, nil
	}
	if !json.Valid(body) {
		return nil, reject(http.StatusBadRequest, client.CodeInvalidJSON, "", "the signal payload is not JSON")
	}
	return json.RawMessage(body), nil
}
