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

// scanner reads a document; stack holds a frame per open array or object:
// an array's element index (>= 0), or -1 minus the offset of the name of
// the object's current member.
type scanner struct {
	data  []byte
	pos   int
	depth int
	stack []int
	// growth is how many bytes longer the numbers read so far are
	// written out in full.
	growth int
}

func (s *scanner) object(depth int) bool { return s.stack[depth] < 0 }

// plain marks the bytes a string may hold as they are: not '"', not '\\',
// not a control character, ASCII.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func (s *scanner) document() error {
	s.space()
	for {
		if err := s.value(); err != nil {
			return err
		}
		// After a value: close containers, or move to the next element.
		for {
			if s.depth == 0 {
				s.space()
				if s.pos < len(s.data) {
					return s.syntax("data after the JSON value")
				}
				return nil
			}
			s.space()
			if s.pos >= len(s.data) {
				return s.syntax("unexpected end of JSON")
			}
			object, c := s.object(s.depth-1), s.data[s.pos]
			if c == ',' {
				s.pos++
				s.space()
				if object {
					if err := s.member(); err != nil {
						return err
					}
				} else {
					s.stack[s.depth-1]++
				}
				break
			}
			if (object && c == '}') || (!object && c == ']') {
				s.pos++
				s.depth--
				continue
			}
			return s.syntax(fmt.Sprintf("invalid character %q after a value", c))
		}
	}
}

// value reads one value, or opens a container and reads up to its first
// value (which the loop in document then reads).
func (s *scanner) value() error {
	for {
		if s.pos >= len(s.data) {
			return s.syntax("unexpected end of JSON")
		}
		switch c := s.data[s.pos]; {
		case c == '{' || c == '[':
			if s.depth == MaxDepth {
				return s.fail(s.pos, ProblemDepth, fmt.Sprintf("arrays and objects nest more than %d deep", MaxDepth))
			}
			if s.depth == len(s.stack) {
				deeper := make([]int, MaxDepth)
				copy(deeper, s.stack)
				s.stack = deeper
			}
			s.pos++
			s.space()
			s.stack[s.depth] = 0
			s.depth++
			if s.pos < len(s.data) && s.data[s.pos] == c+2 { // '}' or ']'
				s.pos++
				s.depth--
				return nil
			}
			if c == '{' {
				if err := s.member(); err != nil {
					return err
				}
			}
			continue
		case c == '"':
			return s.str(false)
		case c == '-' || ('0' <= c && c <= '9'):
			return s.number()
		case c == 't':
			return s.literal("true")
		case c == 'f':
			return s.literal("false")
		case c == 'n':
			return s.literal("null")
		default:
			return s.syntax(fmt.Sprintf("invalid character %q looking for a value", c))
		}
	}
}

// member reads the name of the member of the innermost object and the
// colon after it.
func (s *scanner) member() error {
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		s.depth-- // reported at the object's pointer
		return s.syntax("expected a member name")
	}
	// A problem in the name is reported at the member's pointer.
	s.stack[s.depth-1] = -1 - s.pos
	if err := s.str(true); err != nil {
		return err
	}
	s.space()
	if s.pos >= len(s.data) || s.data[s.pos] != ':' {
		return s.syntax("expected ':' after a member name")
	}
	s.pos++
	s.space()
	return nil
}

func (s *scanner) space() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *scanner) literal(word string) error {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return s.syntax("invalid literal")
	}
	s.pos += len(word)
	return nil
}

// str reads a string; name says it is a member name.
func (s *scanner) str(name bool) error {
	what := "string"
	if name {
		what = "member name"
	}
	d := s.data
	i := s.pos + 1
	for {
		for i < len(d) && plain[d[i]] {
			i++
		}
		if i >= len(d) {
			return s.syntax("unterminated string")
		}
		switch c := d[i]; {
		case c == '"':
			s.pos = i + 1
			return nil
		case c == '\\':
			if i+1 >= len(d) {
				return s.syntax("unterminated string")
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				r, ok := hex4(d, i+2)
				switch {
				case !ok:
					return s.syntaxAt(i, `invalid \u escape`)
				case r == 0:
					return s.fail(i, ProblemNUL, what+` holds U+0000 (\u0000)`)
				case r >= 0xdc00 && r < 0xe000:
					return s.fail(i, ProblemSurrogate, fmt.Sprintf(`%s holds a low surrogate \u%04x with no high surrogate before it`, what, r))
				case r >= 0xd800 && r < 0xdc00:
					lo, ok := rune(0), i+12 <= len(d) && d[i+6] == '\\' && d[i+7] == 'u'
					if ok {
						lo, ok = hex4(d, i+8)
					}
					if !ok || lo < 0xdc00 || lo >= 0xe000 {
						return s.fail(i, ProblemSurrogate, fmt.Sprintf(`%s holds a high surrogate \u%04x with no low surrogate after it`, what, r))
					}
					i += 12
				default:
					i += 6
				}
			default:
				return s.syntaxAt(i, fmt.Sprintf("invalid escape %q", string(d[i:i+2])))
			}
		case c == 0:
			return s.fail(i, ProblemNUL, what+" holds a raw U+0000 byte")
		case c < 0x20:
			return s.syntaxAt(i, fmt.Sprintf("control character U+%04X in a string", c))
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				return s.fail(i, ProblemInvalidUTF8, fmt.Sprintf("%s holds bytes that are not UTF-8 (0x%02x at offset %d)", what, c, i))
			}
			i += size
		}
	}
}

// hex4 decodes the four hex digits at d[i:].
func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, c := range d[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// number reads a number and checks it against numeric's range, the way
// numeric_in computes it: the scale is the digits after the point minus
// the exponent, and the weight is that of the first significant digit.
func (s *scanner) number() error {
	d := s.data
	start, i := s.pos, s.pos
	if d[i] == '-' {
		i++
	}
	// weight is the decimal weight of the first significant digit, once
	// seen; intDigits counts the digits before the point.
	var intDigits, fracDigits int
	weight, significant := 0, false
	switch {
	case i < len(d) && d[i] == '0':
		i++
		intDigits = 1
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
			intDigits++
		}
		weight, significant = intDigits-1, true
	default:
		return s.syntaxAt(start, "invalid number")
	}
	if i < len(d) && d[i] == '.' {
		i++
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			fracDigits++
			if !significant && d[i] != '0' {
				weight, significant = -fracDigits, true
			}
			i++
		}
		if fracDigits == 0 {
			return s.syntaxAt(start, "invalid number")
		}
	}
	exp := 0
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		neg := false
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			neg = d[i] == '-'
			i++
		}
		digits := 0
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			if exp <= maxExponent {
				exp = exp*10 + int(d[i]-'0')
			}
			digits++
			i++
		}
		if digits == 0 {
			return s.syntaxAt(start, "invalid number")
		}
		if neg {
			exp = -exp
		}
	}
	s.pos = i
	scale := fracDigits - exp
	bad := ""
	switch {
	case exp >= maxExponent || exp <= -maxExponent:
		bad = fmt.Sprintf("an exponent of %d or more in magnitude", maxExponent)
	case scale > maxScale:
		bad = fmt.Sprintf("more than %d digits after the decimal point", maxScale)
	case significant && weight+exp > maxDecimalWeight:
		bad = fmt.Sprintf("more than %d digits before the decimal point", maxDecimalWeight+1)
	}
	if bad != "" {
		return s.fail(start, ProblemNumber, fmt.Sprintf("number %s is out of PostgreSQL numeric's range (%s)", numberText(d[start:i]), bad))
	}
	// Written out as numeric_out writes it: sign, integer digits (at
	// least "0"), and the scale's digits after a point.
	written := 1
	if significant && weight+exp > 0 {
		written = weight + exp + 1
	}
	if scale > 0 {
		written += 1 + scale
	}
	if d[start] == '-' && significant {
		written++
	}
	if grows := written - (i - start); grows > 0 {
		s.growth += grows
		if s.growth > MaxNumberGrowth {
			return s.fail(start, ProblemNumberGrowth, fmt.Sprintf(
				"number %s, written out in full as PostgreSQL stores it, makes the document's numbers %d bytes longer, over %d",
				numberText(d[start:i]), s.growth, MaxNumberGrowth))
		}
	}
	return nil
}

func numberText(tok []byte) string {
	if len(tok) > 24 {
		return string(tok[:24]) + "…"
	}
	return string(tok)
}

func (s *scanner) syntax(msg string) error { return s.syntaxAt(s.pos, msg) }

func (s *scanner) syntaxAt(offset int, msg string) error {
	return s.fail(offset, ProblemSyntax, fmt.Sprintf("not JSON: %s at offset %d", msg, offset))
}

// fail builds the Error of a problem at offset, with the pointer of the
// value being read.
func (s *scanner) fail(offset int, problem, reason string) error {
	return &Error{Pointer: s.pointer(), Offset: offset, Problem: problem, Reason: reason}
}

// pointer is the JSON Pointer of the value being read.
func (s *scanner) pointer() string {
	var b strings.Builder
	for _, v := range s.stack[:s.depth] {
		b.WriteByte('/')
		if v >= 0 {
			b.WriteString(strconv.Itoa(v))
			continue
		}
		start := -1 - v
		name := decodeName(s.data[start:nameEnd(s.data, start)])
		name = strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")
		b.WriteString(name)
	}
	return b.String()
}

// nameEnd is the end of the string token that starts at d[start], or
// len(d) if it has none.
func nameEnd(d []byte, start int) int {
	for i := start + 1; i < len(d); i++ {
		switch d[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(d)
}

// decodeName decodes a member name token for a pointer: escapes decoded,
// U+0000 kept, anything undecodable (a lone surrogate, bytes that are not
// UTF-8) as U+FFFD.
func decodeName(tok []byte) string {
	if len(tok) > 0 && tok[0] == '"' {
		tok = tok[1:]
	}
	if len(tok) > 0 && tok[len(tok)-1] == '"' {
		tok = tok[:len(tok)-1]
	}
	var b strings.Builder
	for i := 0; i < len(tok); {
		c := tok[i]
		if c != '\\' {
			r, size := utf8.DecodeRune(tok[i:])
			b.WriteRune(r)
			i += size
			continue
		}
		if i+1 >= len(tok) {
			break
		}
		switch tok[i+1] {
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, ok := hex4(tok, i+2)
			if !ok {
				return b.String()
			}
			i += 6
			if r >= 0xd800 && r < 0xdc00 {
				if lo, ok := hex4(tok, i+2); ok && i+1 < len(tok) && tok[i] == '\\' && tok[i+1] == 'u' && lo >= 0xdc00 && lo < 0xe000 {
					r = 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00)
					i += 6
				} else {
					r = utf8.RuneError
				}
			} else if r >= 0xdc00 && r < 0xe000 {
				r = utf8.RuneError
			}
			b.WriteRune(r)
			continue
		default:
			b.WriteByte(tok[i+1])
		}
		i += 2
	}
	return b.String()
}
