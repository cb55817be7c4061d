package schedspec

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-engine/harvest/api"
)

// DefaultCatchupWindow is a schedule's catch-up window when it gives
// none.
const DefaultCatchupWindow = time.Hour

// DefaultWorkflowIDTemplate makes a fire's workflow_id when its schedule
// gives no template.
const DefaultWorkflowIDTemplate = "{schedule_id}-{nominal_time}"

// WorkflowID is the workflow_id of the fire of schedule id at nominal
// under template.
func WorkflowID(template, id string, nominal time.Time) string {
	if template == "" {
		template = DefaultWorkflowIDTemplate
	}
	return strings.NewReplacer("{schedule_id}", id, "{nominal_time}", nominal.UTC().Format(time.RFC3339Nano),
		"{nominal_unix}", strconv.FormatInt(nominal.Unix(), 10)).Replace(template)
}

// MaxCatchupWindow bounds a schedule's catch-up window.
const MaxCatchupWindow = 365 * 24 * time.Hour

// MaxNoteBytes bounds a schedule's note.
const MaxNoteBytes = 1024

// idPattern is what a schedule id is made of: it goes into keys and
// workflow ids.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// ValidID says whether id is a schedule id: 1 to 128 letters, digits,
// '_', '-' or '.'.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// placeholder finds a workflow_id template's placeholders.
var placeholder = regexp.MustCompile(`\{[^{}]*\}`)

// ValidOverlap says whether p is an overlap policy ("" is skip).
func ValidOverlap(p string) bool {
	switch p {
	case "", api.OverlapSkip, api.OverlapBufferOne, api.OverlapBufferAll, api.OverlapCancelOther, api.OverlapTerminateOther, api.OverlapAllowAll:
		return true
	}
	return false
}

// Overlaps lists the overlap policies, for messages.
const Overlaps = "skip, buffer_one, buffer_all, cancel_other, terminate_other or allow_all"

// CheckRequest checks what of a schedule's definition is not its
// workflow or task queue (the caller checks those against what runs):
// its spec, overlap policy, catch-up window, workflow_id template and
// note. The error is a *FieldError.
func CheckRequest(r *api.ScheduleRequest) (*Spec, error) {
	spec, err := Parse(r.Spec)
	if err != nil {
		return nil, err
	}
	bad := func(field, format string, args ...any) error {
		return &FieldError{Code: api.CodeInvalidScheduleSpec, Field: field, Message: field + ": " + fmt.Sprintf(format, args...)}
	}
	if !ValidOverlap(r.Overlap) {
		return nil, bad("overlap", "%q: want %s", r.Overlap, Overlaps)
	}
	if r.CatchupWindow != "" {
		d, err := time.ParseDuration(r.CatchupWindow)
		switch {
		case err != nil:
			return nil, bad("catchup_window", "%q: want a duration such as \"1h\"", r.CatchupWindow)
		case d < time.Second:
			return nil, bad("catchup_window", "%s: want at least 1s", d)
		case d > MaxCatchupWindow:
			return nil, bad("catchup_window", "%s is beyond the maximum of a year", d)
		}
	}
	if t := r.WorkflowIDTemplate; t != "" {
		for _, p := range placeholder.FindAllString(t, -1) {
			switch p {
			case "{schedule_id}", "{nominal_time}", "{nominal_unix}":
			default:
				return nil, bad("workflow_id_template", "%q holds %s: the placeholders are {schedule_id}, {nominal_time} and {nominal_unix}", t, p)
			}
		}
		if strings.ContainsAny(placeholder.ReplaceAllString(t, ""), "{}") {
			return nil, bad("workflow_id_template", "%q holds an unmatched brace", t)
		}
	}
	if len(r.Note) > MaxNoteBytes {
		return nil, bad("note", "%d bytes: want at most %d", len(r.Note), MaxNoteBytes)
	}
	return spec, nil
}
