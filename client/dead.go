package client

import (
	"context"
	"errors"
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
	path := withQuery(apiPrefix+"/commands/dead", q)
	var a ListDeadCommandsResponse
	if err := c.get(ctx, path, &a); err != nil {
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
	var d DeadCommand
	if err := c.get(ctx, path, &d); err != nil {
		return nil, err
	}
	return &d, nil
}
