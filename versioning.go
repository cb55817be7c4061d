package harvest

import (
	"fmt"

	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/wire"
)

// DefaultVersion is the version GetVersion returns to an execution that
// passed the change before the code that asks for it was deployed: the
// code as it was before the change.
const DefaultVersion = -1

// GetVersion lets workflow code change while executions of it run. Put
// the change behind it:
//
//	if harvest.GetVersion(ctx, "add-fraud-check", harvest.DefaultVersion, 1) == 1 {
//		// the new steps
//	}
//
// The first time an execution reaches the call, GetVersion records
// maxSupported in its history (a VersionMarker event with the change id)
// and returns it; every replay returns the recorded version. An execution
// that went past this point under the code from before the change has no
// marker, and gets DefaultVersion, so its replay takes the old path it
// took. Every later call with the same change id in the same execution
// returns the same version.
//
// To change the same point again, raise maxSupported (the new branch
// gets it); to drop an old branch once no open execution has its version
// (GET /api/harvest/workflows/{name}/versions tells), raise minSupported.
// An execution whose recorded version is outside [minSupported,
// maxSupported] cannot run this code: its workflow task fails with a
// *VersionError, and is retried, so that deploying code that supports
// its version again lets it go on. A change id must be non-empty text,
// and minSupported at most maxSupported; the call fails the workflow task
// otherwise, naming it.
//
// A marker a later version of the code no longer asks for (the call was
// removed once every execution took the new path) is passed over on
// replay.
func GetVersion(ctx *WorkflowContext, changeID string, minSupported, maxSupported int) int {
	x := ctx.x
	if err := checkChange(changeID, minSupported, maxSupported); err != nil {
		panic(err)
	}
	if v, ok := x.versionsGiven[changeID]; ok {
		return v
	}
	v, recorded := x.versions[changeID]
	switch {
	case recorded:
		// On every replay, as the first time: the decision matches the
		// marker the history holds.
		x.decide(wire.Decision{Type: wire.DecisionRecordVersion, Version: &wire.VersionMarkerAttrs{ChangeID: changeID, Version: v}})
	case x.replaying:
		// The execution went past this point before the change.
		v = DefaultVersion
	default:
		v = maxSupported
		x.versions[changeID] = v
		x.decide(wire.Decision{Type: wire.DecisionRecordVersion, Version: &wire.VersionMarkerAttrs{ChangeID: changeID, Version: v}})
	}
	if v < minSupported || v > maxSupported {
		panic(&VersionError{ChangeID: changeID, Version: v, Min: minSupported, Max: maxSupported})
	}
	x.versionsGiven[changeID] = v
	return v
}

// Patched is GetVersion for the common change with two branches: it says
// whether the execution takes the new code (it reached this point under
// code that has the patch), rather than the old (it went past before).
//
//	if harvest.Patched(ctx, "add-fraud-check") {
//		// the new steps
//	}
func Patched(ctx *WorkflowContext, changeID string) bool {
	return GetVersion(ctx, changeID, DefaultVersion, 1) == 1
}

// DeprecatePatch replaces a Patched call once no open execution took the
// old branch: the old code is gone, and the new runs unconditionally.
// Executions that recorded the patch replay as before, and new ones
// record it too, so that code which still has Patched(ctx, changeID)
// (a worker of the previous deploy) replays them. An execution that went
// past the point without the patch cannot run this code: its workflow
// task fails with a *VersionError. Once no worker runs Patched for the
// change, the call can go.
func DeprecatePatch(ctx *WorkflowContext, changeID string) {
	GetVersion(ctx, changeID, 1, 1)
}

// VersionError is why a workflow task failed at a GetVersion call: the
// version the execution recorded for the change is one the code no longer
// supports. The execution is not failed: its task is retried, and code
// that supports the version again runs it.
type VersionError struct {
	ChangeID string
	// Version is the one the execution took (DefaultVersion: it went
	// past the change before it was made).
	Version  int
	Min, Max int
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("GetVersion(%q): the execution took version %d, and this code supports %d to %d", e.ChangeID, e.Version, e.Min, e.Max)
}

// failureType is the type of the workflow task's failure.
func (e *VersionError) failureType() string { return "VersionUnsupported" }

// checkChange refuses a GetVersion call no history could record.
func checkChange(changeID string, minSupported, maxSupported int) error {
	if changeID == "" {
		return fmt.Errorf("harvest: GetVersion: the change id is empty")
	}
	if err := storable.CheckText(changeID); err != nil {
		return fmt.Errorf("harvest: GetVersion(%q): the change id cannot be recorded: %w", changeID, err)
	}
	if minSupported > maxSupported {
		return fmt.Errorf("harvest: GetVersion(%q, %d, %d): minSupported is above maxSupported", changeID, minSupported, maxSupported)
	}
	if minSupported < DefaultVersion {
		return fmt.Errorf("harvest: GetVersion(%q, %d, %d): no version is below DefaultVersion (%d)", changeID, minSupported, maxSupported, DefaultVersion)
	}
	return nil
}
