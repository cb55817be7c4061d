// Package versioned is one workflow in the versions of its code that the
// versioning end-to-end tests (e2e/versioning_test.go) deploy one after
// another: the worker binary (e2e/testdata/versionworker) runs the
// variant its environment names, and the tests replay exported
// histories on the same code in their own process. It lives under
// e2e/internal, not testdata, so that `go build ./...`, `go vet ./...`
// and the linters check it with the rest of the module.
//
// The workflow runs the activity prepare, waits for the signal proceed,
// runs finish, and returns the activities it ran. The change the tests
// deploy inserts the activity audit after prepare, before the signal
// wait: executions parked at the signal went past the change under the
// old code, so that code with the change behind harvest.Patched replays
// them on the old branch, and code without it diverges.
package versioned

import (
	"fmt"
	"time"

	"github.com/harvest-engine/harvest"
)

// The names the tests and the worker share. They are persisted in
// histories, so they are constants.
const (
	Workflow = "versioned_order"
	Signal   = "proceed"
	// ChangeID is the change v2 puts behind harvest.Patched.
	ChangeID = "add-audit"

	Prepare = "versioned_prepare"
	Audit   = "versioned_audit"
	Finish  = "versioned_finish"
)

// The variants of the code, as VERSION_VARIANT names them.
const (
	// V1 is the code before the change.
	V1 = "v1"
	// V2 inserts Audit behind harvest.Patched(ctx, ChangeID).
	V2 = "v2"
	// V2Bad inserts Audit unconditionally: executions that went past the
	// point under V1 diverge when V2Bad replays them.
	V2Bad = "v2bad"
)

// Register returns the registration of a variant's code: the workflow
// and its three activities.
func Register(variant string) (func(*harvest.Worker), error) {
	var audit func(*harvest.WorkflowContext) bool
	switch variant {
	case V1:
		audit = func(*harvest.WorkflowContext) bool { return false }
	case V2:
		audit = func(ctx *harvest.WorkflowContext) bool { return harvest.Patched(ctx, ChangeID) }
	case V2Bad:
		audit = func(*harvest.WorkflowContext) bool { return true }
	default:
		return nil, fmt.Errorf("versioned: variant %q: want %s, %s or %s", variant, V1, V2, V2Bad)
	}
	return func(w *harvest.Worker) {
		for _, name := range []string{Prepare, Audit, Finish} {
			harvest.RegisterActivity(w, name, func(*harvest.ActivityContext, string) (string, error) { return name, nil })
		}
		harvest.RegisterWorkflow(w, Workflow, func(ctx *harvest.WorkflowContext, order string) ([]string, error) {
			var ran []string
			step := func(name string) error {
				var done string
				if err := harvest.ExecuteActivity(ctx, name, order, harvest.ActivityOptions{StartToClose: 10 * time.Second}).Get(&done); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				ran = append(ran, done)
				return nil
			}
			if err := step(Prepare); err != nil {
				return ran, err
			}
			if audit(ctx) {
				if err := step(Audit); err != nil {
					return ran, err
				}
			}
			if err := harvest.GetSignalChannel(ctx, Signal).Receive(nil); err != nil {
				return ran, err
			}
			return ran, step(Finish)
		})
	}, nil
}
