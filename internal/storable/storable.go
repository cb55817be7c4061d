package storable

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxDepth is how deep arrays and objects may nest in a JSON document.
const MaxDepth = 512

// MaxNumberGrowth bounds how many bytes longer a document's numbers become
// written out in full, as PostgreSQL stores and returns them: 1e131071 is
// 8 bytes sent and 131072 digits read back, so without a bound a body of
// a few kilobytes would come back from the database, and go to workers,
// as hundreds of megabytes. Ordinary numbers grow by little: a float64 by
// a few hundred bytes at most (4.9406564584124654e-324 is written with 340
// digits after the point).
const MaxNumberGrowth = 64 << 10

// Limits of PostgreSQL's numeric, which stores jsonb numbers (PostgreSQL
// 15, src/backend/utils/adt/numeric.c).
const (
	// maxExponent: numeric_in refuses an exponent whose magnitude is
	// INT_MAX/2 or more, before anything else.
	maxExponent = 1<<30 - 1
	// maxScale: NUMERIC_DSCALE_MAX, the digits after the decimal point.
	maxScale = 16383
	// maxDecimalWeight: the base-10000 weight is an int16, so the first
	// significant digit may stand at most 4*32767+3 places before the
	// point.
	maxDecimalWeight = 4*32767 + 3
)

// Problems: what an Error found.
const (
	// ProblemSyntax: the document is not JSON.
	ProblemSyntax = "syntax"
	// ProblemNUL: U+0000, escaped or raw.
	ProblemNUL = "nul"
	// ProblemInvalidUTF8: bytes that are not UTF-8.
	ProblemInvalidUTF8 = "invalid_utf8"
	// ProblemSurrogate: an unpaired UTF-16 surrogate escape.
	ProblemSurrogate = "lone_surrogate"
	// ProblemNumber: a number outside PostgreSQL numeric's range.
	ProblemNumber = "number_out_of_range"
	// ProblemNumberGrowth: numbers that, written out in full, make the
	// document more than MaxNumberGrowth bytes longer.
	ProblemNumberGrowth = "number_growth"
	// ProblemDepth: arrays and objects nested deeper than MaxDepth.
	ProblemDepth = "too_deep"
	// ProblemControl: a control character in an identifier.
	ProblemControl = "control_character"
)

// ErrUnstorable is matched (errors.Is) by every *Error.
var ErrUnstorable = errors.New("value cannot be stored")

// Error says what in a JSON document or a text cannot be stored, and
// where.
type Error struct {
	// Pointer is the JSON Pointer (RFC 6901) of the offending value, ""
	// for the whole document; for a member name at fault, the member's.
	// Empty for a text.
	Pointer string
	// Offset is the byte offset of the offending byte or token.
	Offset int
	// Problem is one of the Problem constants.
	Problem string
	// Reason is for a person, e.g. "string holds U+0000".
	Reason string
}

func (e *Error) Error() string {
	reason := e.Reason
	switch e.Problem {
	case ProblemSyntax, ProblemControl:
	default:
		reason += ", which Harvest cannot store"
	}
	if e.Pointer == "" {
		return reason
	}
	return "at " + DisplayPointer(e.Pointer) + ": " + reason
}

// Is makes errors.Is(err, ErrUnstorable) hold.
func (e *Error) Is(target error) bool { return target == ErrUnstorable }

// DisplayPointer makes a JSON Pointer fit in a message: quoted when it
// holds control characters or bytes that are not UTF-8, and cut after 200
// bytes.
func DisplayPointer(p string) string {
	const limit = 200
	cut := len(p) > limit
	if cut {
		p = strings.ToValidUTF8(p[:limit], "")
	}
	if !utf8.ValidString(p) || strings.ContainsFunc(p, isControl) {
		p = strconv.Quote(p)
	}
	if cut {
		p += "…"
	}
	return p
}

func isControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) }

// CheckText returns nil if s can be stored as PostgreSQL text: it holds no
// U+0000 and is UTF-8. Otherwise it returns an *Error.
func CheckText(s string) error { return checkText(s, false) }

// CheckIdentifier is CheckText, and also refuses control characters
// (U+0000 to U+001F, U+007F to U+009F).
func CheckIdentifier(s string) error { return checkText(s, true) }

func checkText(s string, identifier bool) error {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == 0:
				return &Error{Offset: i, Problem: ProblemNUL, Reason: fmt.Sprintf("holds U+0000 at byte %d", i)}
			case identifier && (c < 0x20 || c == 0x7f):
				return &Error{Offset: i, Problem: ProblemControl, Reason: fmt.Sprintf("holds the control character U+%04X at byte %d", c, i)}
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return &Error{Offset: i, Problem: ProblemInvalidUTF8, Reason: fmt.Sprintf("holds bytes that are not UTF-8 at byte %d", i)}
		case identifier && r < 0xa0:
			return &Error{Offset: i, Problem: ProblemControl, Reason: fmt.Sprintf("holds the control character U+%04X at byte %d", r, i)}
		}
		i += size
	}
	return nil
}

// CheckJSON returns nil if raw is one JSON value, optionally surrounded by
// white space, that PostgreSQL can store as jsonb and that nests at most
// MaxDepth deep. Otherwise it returns an *Error naming the first problem
// in document order.
func CheckJSON(raw []byte) error {
	var shallow [32]int
	s := scanner{data: raw, stack: shallow[:]}
	return s.document()
}

// plain marks the bytes a string may hold as they are: not '"', not '\\',
// not a control character, ASCII.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()
