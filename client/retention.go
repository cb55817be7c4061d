package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/harvest-engine/harvest/api"
)

// RetentionResponse is api.RetentionResponse.
type RetentionResponse = api.RetentionResponse

// WorkflowRetention is api.WorkflowRetention.
type WorkflowRetention = api.WorkflowRetention

// Retention reads what is past retention and not pruned yet, by
// workflow (GET /api/harvest/retention). A zero asOf means the server's
// now; another time counts the executions whose prune time is before it,
// so that a caller can follow what was past retention when it asked for a
// prune (PruneNow's AsOf) while more executions keep passing theirs.
func (c *Client) Retention(ctx context.Context, asOf time.Time) (*RetentionResponse, error) {
	path := apiPrefix + "/retention"
	if !asOf.IsZero() {
		path += "?" + url.Values{"as_of": {asOf.UTC().Format(time.RFC3339Nano)}}.Encode()
	}
	return c.retention(ctx, http.MethodGet, path)
}

// PruneNow asks every scheduler to prune the executions past their
// retention now rather than at its next interval (POST
// /api/harvest/retention/prune; the admin scope), and returns what was
// past retention when it asked. The pruning goes on after it returns:
// follow it with Retention(ctx, r.AsOf) until it is no longer Pending.
// When no scheduler is running the answer is an *APIError matching
// ErrUnavailable.
func (c *Client) PruneNow(ctx context.Context) (*RetentionResponse, error) {
	return c.retention(ctx, http.MethodPost, apiPrefix+"/retention/prune")
}

func (c *Client) retention(ctx context.Context, method, path string) (*RetentionResponse, error) {
	resp, err := c.do(ctx, method, path, nil, nil)
	if err != nil {
		return nil, err
	}
	var a RetentionResponse
	if err := decode(method, path, resp.body, &a); err != nil {
		return nil, err
	}
	if a.Workflows == nil {
		a.Workflows = []WorkflowRetention{}
	}
	return &a, nil
}
