package dedup

import (
	"errors"
	"fmt"
)

// ErrInvalidName is returned for a workflow, activity, queue or signal name
// that cannot travel in a subject or a URL path segment.
var ErrInvalidName = errors.New("invalid name")

// MaxNameBytes bounds workflow, activity and task queue names.
const MaxNameBytes = 128

// MaxWorkflowIDBytes bounds a workflow_id, whether a caller sends it or a
// webhook or binding rule renders it from an event's template.
const MaxWorkflowIDBytes = 256

// MaxBuildIDBytes bounds a worker's build id.
const MaxBuildIDBytes = 128

// ErrInvalidBuildID is returned for a build id that cannot be recorded and
// named in a URL as it is.
var ErrInvalidBuildID = errors.New("invalid build id")

// ValidateBuildID checks a worker's build id: 1 to 128 bytes of ASCII
// letters, digits and '.', '_', '-', '+', '~' (a version, a VCS revision,
// a hash), safe in a URL path segment and a query.
func ValidateBuildID(id string) error {
	if id == "" || len(id) > MaxBuildIDBytes {
		return fmt.Errorf("%w %q: want 1 to %d bytes", ErrInvalidBuildID, id, MaxBuildIDBytes)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c == '.' || c == '_' || c == '-' || c == '+' || c == '~' || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
		if !ok {
			return fmt.Errorf("%w %q: only letters, digits and '.', '_', '-', '+', '~'", ErrInvalidBuildID, id)
		}
	}
	return nil
}

// ValidateName checks a workflow, activity or task queue name: 1 to 128
// bytes of ASCII letters, digits, '_' and '-'. Such names are safe as
// subject tokens and consumer names.
func ValidateName(name string) error {
	if name == "" || len(name) > MaxNameBytes {
		return fmt.Errorf("%w %q: want 1 to %d bytes", ErrInvalidName, name, MaxNameBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c == '_' || c == '-' || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
		if !ok {
			return fmt.Errorf("%w %q: only letters, digits, '_' and '-'", ErrInvalidName, name)
		}
	}
	return nil
}
