package storable

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

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
	// seen. A lone leading 0 is not significant and gives none.
	fracDigits := 0
	weight, significant := 0, false
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		// intDigits counts the digits before the point.
		intDigits := 0
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
