package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/harvest-engine/harvest/api"
)

// DeadCommand is api.DeadCommand.
type DeadCommand = api.DeadCommand

// DeadCommandsOptions filters DeadCommands. Zero values mean every shard,
// from the newest, and the server's default limit (50).
type DeadCommandsOptions struct {
	Shard *int
	// Before lists dead commands older than this id (the next page).
	Before int64
	// Limit is 1 to 500.
	Limit int
}

// DeadCommands lists dead commands, newest first, without payloads.
func (c *Client) DeadCommands(ctx context.Context, opts DeadCommandsOptions) ([]DeadCommand, error) {
	q := url.Values{}
	if opts.Shard != nil {
		q.Set("shard", strconv.Itoa(*opts.Shard))
	}
	if opts.Before > 0 {
		q.Set("before", strconv.FormatInt(opts.Before, 10))
	}
	if opts.Limit != 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	path := apiPrefix + "/commands/dead"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	resp, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return nil, err
	}
	var a ListDeadCommandsResponse
	if err := decode(http.MethodGet, path, resp.body, &a); err != nil {
		return nil, err
	}
	if a.DeadCommands == nil {
		a.DeadCommands = []DeadCommand{}
	}
	return a.DeadCommands, nil
}

// DeadCommand reads one dead command with its payload; an unknown id is
// an *APIError matching ErrNotFound.
func (c *Client) DeadCommand(ctx context.Context, id int64) (*DeadCommand, error) {
	if id <= 0 {
		return nil, errors.New("client: DeadCommand: id must be positive")
	}
	path := apiPrefix + "/commands/dead/" + strconv.FormatInt(id, 10)
	resp, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return nil, err
	}
	var d DeadCommand
	if err := decode(http.MethodGet, path, resp.body, &d); err != nil {
		return nil, err
	}
	return &d, nil
}
