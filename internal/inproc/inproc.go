// Package inproc is the module-internal side of a Worker bound in
// process for the test kit (package harvesttest): harvest.BindTestKit
// returns a harvesttype.TestKitWorker, which the test kit turns into a
// Worker here (Of) to reach the handlers a worker's runtime
// (internal/workerrt) runs tasks with, and the workflows' input schemas.
// Those name internal types, so they are kept out of every public
// signature; this package keeps them out of the root package's API.
//
// It must not hold state or run anything: it is the interface alone.
package inproc

import (
	"fmt"

	"github.com/harvest-engine/harvest/harvesttype"
	"github.com/harvest-engine/harvest/internal/schema"
	"github.com/harvest-engine/harvest/internal/workerrt"
)

// Worker is a Worker's registrations bound in process, as the test kit
// runs them. The root package's binding implements it (and asserts so);
// it may be used from several goroutines.
type Worker interface {
	harvesttype.TestKitWorker
	// Handlers are what a worker's runtime runs the registrations' tasks
	// with.
	Handlers() workerrt.Handlers
	// Schema is the input schema of workflow, nil without one.
	Schema(workflow string) *schema.Schema
}

// Of returns w's module-internal side. It fails only for a w that
// harvest.BindTestKit did not make.
func Of(w harvesttype.TestKitWorker) (Worker, error) {
	iw, ok := w.(Worker)
	if !ok {
		return nil, fmt.Errorf("in-process worker: %T is not the binding harvest.BindTestKit makes", w)
	}
	return iw, nil
}
