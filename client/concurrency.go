package client

import (
	"context"
	"errors"
	"net/url"

	"github.com/harvest-engine/harvest/api"
)

// WaitingForConcurrency is Execution.WaitingFor of a Pending execution:
// it waits for a slot of its concurrency start policy's key
// (Execution.ConcurrencyKey).
const WaitingForConcurrency = api.WaitingForConcurrency

// Concurrency tells how many executions of workflow run, and how many
// wait Pending, under its concurrency start policy's key value key
// (GET /api/harvest/workflows/{name}/concurrency?key=), and the policy's
// limit. Key "" is the policy without a key, which counts the whole
// workflow. A key no start used answers zero of everything, Limit
// included.
func (c *Client) Concurrency(ctx context.Context, workflow, key string) (*ConcurrencyResponse, error) {
	if workflow == "" {
		return nil, errors.New("client: Concurrency: workflow name is required")
	}
	q := url.Values{}
	if key != "" {
		q.Set("key", key)
	}
	var a ConcurrencyResponse
	if err := c.get(ctx, withQuery(apiPrefix+"/workflows/"+url.PathEscape(workflow)+"/concurrency", q), &a); err != nil {
		return nil, err
	}
	return &a, nil
}
