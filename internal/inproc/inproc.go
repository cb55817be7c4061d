// Package inproc carries a Worker's registrations to the test kit
// (package harvesttest), which runs them in process, without NATS, with
// the handlers a worker's runtime (internal/workerrt) runs them with.
package inproc

import (
	"github.com/harvest-engine/harvest/internal/schema"
	"github.com/harvest-engine/harvest/internal/workerrt"
)

// Binding is what harvest.BindInProcess fills in: the registrations'
// handlers, the workflows registered, and their input schemas.
type Binding struct {
	Handlers  workerrt.Handlers
	Workflows []string
	Schemas   map[string]*schema.Schema
	// Close ends the executions the worker keeps in memory between their
	// workflow tasks (their workflow goroutines): call it when done with
	// the handlers.
	Close func()
	// Replace makes fn, a function of an activity's form, the activity
	// name (the test kit's OnActivity).
	Replace func(name string, fn any) error
}
