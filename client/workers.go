package client

import (
	"context"
	"errors"
	"net/url"

	"github.com/harvest-engine/harvest/api"
)

// Worker is api.Worker.
type Worker = api.Worker

// WorkerSlots is api.WorkerSlots.
type WorkerSlots = api.WorkerSlots

// SlotUsage is api.SlotUsage.
type SlotUsage = api.SlotUsage

// ReplayRefusal is api.ReplayRefusal.
type ReplayRefusal = api.ReplayRefusal

// ListWorkersResponse is api.ListWorkersResponse.
type ListWorkersResponse = api.ListWorkersResponse

// TaskQueueResponse is api.TaskQueueResponse.
type TaskQueueResponse = api.TaskQueueResponse

// NameBacklog is api.NameBacklog.
type NameBacklog = api.NameBacklog

// UnroutedBacklog is api.UnroutedBacklog.
type UnroutedBacklog = api.UnroutedBacklog

// Workers lists the live workers (GET /api/harvest/workers).
func (c *Client) Workers(ctx context.Context) ([]Worker, error) {
	path := apiPrefix + "/workers"
	var a ListWorkersResponse
	if err := c.get(ctx, path, &a); err != nil {
		return nil, err
	}
	if a.Workers == nil {
		a.Workers = []Worker{}
	}
	return a.Workers, nil
}

// TaskQueue tells a task queue's backlog and workers by workflow and
// activity (GET /api/harvest/task-queues/{name}). A name that is not a
// task queue's is an *APIError with code invalid_task_queue.
func (c *Client) TaskQueue(ctx context.Context, name string) (*TaskQueueResponse, error) {
	if name == "" {
		return nil, errors.New("client: TaskQueue: name is required")
	}
	path := apiPrefix + "/task-queues/" + url.PathEscape(name)
	var a TaskQueueResponse
	if err := c.get(ctx, path, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// WorkflowVersions tells which code workflow's open executions run: by
// the build that ran their last workflow task, and by the version each
// recorded of each change (harvest.GetVersion).
func (c *Client) WorkflowVersions(ctx context.Context, workflow string) (*WorkflowVersionsResponse, error) {
	var a WorkflowVersionsResponse
	if err := c.get(ctx, apiPrefix+"/workflows/"+url.PathEscape(workflow)+"/versions", &a); err != nil {
		return nil, err
	}
	return &a, nil
}
