package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/harvest-engine/harvest/api"
)

// apiCaller calls the HTTP API's own handler in the process, as one more
// client: each request carries the console user's token, so the API's
// scopes and workflow limits decide what the console may show and do.
type apiCaller struct {
	h     http.Handler
	token string
}

// call sends method path (with query q, and body encoded as JSON unless
// nil) and decodes a 2xx answer into out (unless nil). Any other answer
// is an *apiError.
func (a apiCaller) call(ctx context.Context, method, path string, q url.Values, body, out any) error {
	var rd io.Reader = http.NoBody
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(raw)
	}
	u := path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.RemoteAddr = "console"
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	rec := &recorder{header: http.Header{}}
	a.h.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.status < 200 || rec.status > 299 {
		e := &apiError{status: rec.status}
		_ = json.Unmarshal(rec.body.Bytes(), &e.body)
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
		return fmt.Errorf("decode %s %s: %w", method, path, err)
	}
	return nil
}

// apiError is an answer of the API other than 2xx: its HTTP status and
// its body, whose message the pages show. (Package client has its own,
// APIError, but the server, the console with it, never imports the
// users' client.)
type apiError struct {
	status int
	body   api.ErrorResponse
}

func (e *apiError) Error() string {
	if e.body.Error == "" {
		return fmt.Sprintf("HTTP %d: %s", e.status, http.StatusText(e.status))
	}
	return fmt.Sprintf("HTTP %d %s: %s", e.status, e.body.Error, e.body.Message)
}

// recorder is the http.ResponseWriter an in-process call answers into.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}
