package client

import (
	"github.com/harvest-engine/harvest/api"

	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// BatchRequest is api.BatchRequest.
type BatchRequest = api.BatchRequest

// BatchFilter is api.BatchFilter.
type BatchFilter = api.BatchFilter

// BatchSignalSpec is api.BatchSignalSpec.
type BatchSignalSpec = api.BatchSignalSpec

// BatchResetSpec is api.BatchResetSpec.
type BatchResetSpec = api.BatchResetSpec

// BatchOperation is api.BatchOperation.
type BatchOperation = api.BatchOperation

// BatchError is api.BatchError.
type BatchError = api.BatchError

// ListBatchesResponse is api.ListBatchesResponse.
type ListBatchesResponse = api.ListBatchesResponse

// StartBatch starts a batch operation (docs/batches.md): req's operation
// applied to every execution its filter matches, at its rate. With a key
// (an Idempotency-Key), the same key is the same batch: a retry answers
// it as it stands. A malformed request is an *APIError matching
// ErrInvalidFilter or the invalid_batch code.
func (c *Client) StartBatch(ctx context.Context, req BatchRequest, key string) (*BatchOperation, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("client: StartBatch: %w", err)
	}
	header := http.Header{}
	if key != "" {
		header.Set("Idempotency-Key", key)
	}
	path := apiPrefix + "/batches"
	resp, err := c.do(ctx, http.MethodPost, path, header, body)
	if err != nil {
		return nil, err
	}
	var b BatchOperation
	if err := decode(http.MethodPost, path, resp.body, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// Batch reads a batch operation's progress; an unknown one is an
// *APIError matching ErrBatchNotFound.
func (c *Client) Batch(ctx context.Context, id string) (*BatchOperation, error) {
	if id == "" {
		return nil, fmt.Errorf("client: Batch: batch id is required")
	}
	var b BatchOperation
	if err := c.get(ctx, apiPrefix+"/batches/"+url.PathEscape(id), &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// ListBatches lists the newest batch operations, at most limit (0: the
// server's default).
func (c *Client) ListBatches(ctx context.Context, limit int) ([]BatchOperation, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out ListBatchesResponse
	if err := c.get(ctx, withQuery(apiPrefix+"/batches", q), &out); err != nil {
		return nil, err
	}
	return out.Batches, nil
}

// CancelBatch cancels a batch operation: it sends its operation to no
// more executions. It answers the batch as it stands.
func (c *Client) CancelBatch(ctx context.Context, id string) (*BatchOperation, error) {
	if id == "" {
		return nil, fmt.Errorf("client: CancelBatch: batch id is required")
	}
	path := apiPrefix + "/batches/" + url.PathEscape(id) + "/cancel"
	resp, err := c.do(ctx, http.MethodPost, path, nil, nil)
	if err != nil {
		return nil, err
	}
	var b BatchOperation
	if err := decode(http.MethodPost, path, resp.body, &b); err != nil {
		return nil, err
	}
	return &b, nil
}
