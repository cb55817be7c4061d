package poison

import (
	"math/rand/v2"
	"strconv"
	"strings"
)

// Classic are named values Harvest refuses to store, one of each kind:
// all but the last two are refused by PostgreSQL's jsonb too.
var Classic = []struct{ Name, JSON string }{
	{"nul escape", `"a\u0000b"`},
	{"nul in a member name", `{"k\u0000": 1}`},
	{"lone high surrogate", `"\ud800"`},
	{"lone low surrogate", `"\udc00"`},
	{"reversed surrogates", `"\udc00\ud800"`},
	{"invalid utf-8", "\"\xff\xfe\""},
	{"utf-8 surrogate", "\"\xed\xa0\x80\""},
	{"huge exponent", `1e1000000`},
	{"too many fraction digits", "0." + strings.Repeat("1", 16384)},
	{"nested nul", `{"a": [{"b": "\u0000"}]}`},
	{"too deep", strings.Repeat("[", 600) + strings.Repeat("]", 600)},
	{"numbers that grow written out", `[1e40000, 1e40000]`},
}

// Document returns a document: a JSON value that may hold hazards, may nest
// deeply, and now and then is not JSON at all.
func Document(rng *rand.Rand) []byte {
	g := gen{rng: rng}
	if rng.IntN(2) == 0 {
		g.hazard = 0.04 + rng.Float64()*0.2
	}
	switch r := rng.IntN(100); {
	case r < 6:
		g.deep(rng.IntN(3))
	default:
		g.value(0)
	}
	if rng.IntN(20) == 0 && len(g.b) > 0 {
		// Not JSON: cut short, or a stray byte.
		at := rng.IntN(len(g.b))
		if rng.IntN(2) == 0 {
			g.b = g.b[:at]
		} else {
			const stray = "{}[],:\"\\x0"
			g.b = append(g.b[:at], append([]byte{stray[rng.IntN(len(stray))]}, g.b[at:]...)...)
		}
	}
	return g.b
}

// Unstorable returns a value that Harvest refuses to store: a document
// with at least one hazard in a string, a member name or a number, or
// nested deeper than PostgreSQL's smallest stack allows. It is JSON but
// for one hazard: a raw U+0000 byte in a string.
func Unstorable(rng *rand.Rand) []byte {
	g := gen{rng: rng, hazard: rng.Float64() * 0.3}
	switch rng.IntN(8) {
	case 0:
		return []byte(Classic[rng.IntN(len(Classic))].JSON)
	case 1:
		n := 700 + rng.IntN(3000)
		return []byte(strings.Repeat("[", n) + "1" + strings.Repeat("]", n))
	}
	// A value with a sure hazard somewhere inside.
	g.b = append(g.b, `{"ok": `...)
	g.value(1)
	g.b = append(g.b, `, "bad": `...)
	if rng.IntN(3) == 0 {
		g.badNumber()
	} else {
		g.b = append(g.b, '"')
		g.piece(false)
		g.hazardPiece()
		g.piece(false)
		g.b = append(g.b, '"')
	}
	return append(g.b, '}')
}

// Text returns a short text that may hold U+0000, control characters or
// bytes that are not UTF-8.
func Text(rng *rand.Rand) string {
	var b strings.Builder
	for range 1 + rng.IntN(6) {
		switch rng.IntN(10) {
		case 0:
			b.WriteByte(0)
		case 1:
			b.WriteByte(byte(1 + rng.IntN(31)))
		case 2:
			b.WriteString(invalidUTF8[rng.IntN(len(invalidUTF8))])
		case 3:
			b.WriteString("\u0085\x7f")
		case 4, 5:
			b.WriteString(unicode[rng.IntN(len(unicode))])
		default:
			b.WriteString(words[rng.IntN(len(words))])
		}
	}
	return b.String()
}

var (
	words       = []string{"order", "42", "evt_1", "a-b", "x y", "~/", "", "Z"}
	unicode     = []string{"é", "日本", "😀", "\u2028", "\uFFFD", "\uFFFF", "\u00a0"}
	invalidUTF8 = []string{"\xff", "\xfe", "\xc0\xaf", "\xed\xa0\x80", "\xe6\x97", "\xf4\x90\x80\x80", "\x80"}
	escapes     = []string{`\n`, `\t`, `\"`, `\\`, `\/`, `\u00e9`, `\ud83d\ude00`, `\u0001`, `\uffff`, `\b`}
	hazards     = []string{`\u0000`, "\x00", `\ud800`, `\udc00`, `\udc00\ud800`, `\ud800\ud800`, `\ud800A`,
		"\xff", "\xed\xa0\x80", "\xc0\xaf", "\xe6\x97"}
)

type gen struct {
	rng    *rand.Rand
	b      []byte
	hazard float64 // chance that a string piece or a number is one PostgreSQL refuses
}

func (g *gen) hit() bool { return g.hazard > 0 && g.rng.Float64() < g.hazard }

// deep nests a value around the depth limits.
func (g *gen) deep(kind int) {
	n := []int{511, 512, 513, 700, 20000}[g.rng.IntN(5)]
	open, closing := "[", "]"
	if kind == 1 {
		open, closing = `{"a":`, "}"
	}
	g.b = append(g.b, strings.Repeat(open, n)...)
	g.value(5)
	g.b = append(g.b, strings.Repeat(closing, n)...)
}

func (g *gen) value(depth int) {
	switch r := g.rng.IntN(100); {
	case r < 18 && depth < 5:
		g.b = append(g.b, '{')
		for i := range g.rng.IntN(5) {
			if i > 0 {
				g.b = append(g.b, ", "...)
			}
			g.str(true)
			g.b = append(g.b, ": "...)
			g.value(depth + 1)
		}
		g.b = append(g.b, '}')
	case r < 34 && depth < 5:
		g.b = append(g.b, '[')
		for i := range g.rng.IntN(5) {
			if i > 0 {
				g.b = append(g.b, ',')
			}
			g.value(depth + 1)
		}
		g.b = append(g.b, ']')
	case r < 65:
		g.str(false)
	case r < 90:
		if g.hit() {
			g.badNumber()
		} else {
			g.number()
		}
	default:
		g.b = append(g.b, []string{"true", "false", "null"}[g.rng.IntN(3)]...)
	}
}

func (g *gen) str(name bool) {
	g.b = append(g.b, '"')
	for range g.rng.IntN(5) {
		if g.hit() {
			g.hazardPiece()
		} else {
			g.piece(name)
		}
	}
	g.b = append(g.b, '"')
}

func (g *gen) piece(name bool) {
	switch r := g.rng.IntN(10); {
	case r < 2:
		g.b = append(g.b, unicode[g.rng.IntN(len(unicode))]...)
	case r < 4:
		g.b = append(g.b, escapes[g.rng.IntN(len(escapes))]...)
	case r == 4 && !name && g.rng.IntN(20) == 0:
		g.b = append(g.b, strings.Repeat("long text ", 1000+g.rng.IntN(10000))...)
	default:
		g.b = append(g.b, []string{"a", "id", "x y", "order-1", "~0/1", "ü"}[g.rng.IntN(6)]...)
	}
}

func (g *gen) hazardPiece() { g.b = append(g.b, hazards[g.rng.IntN(len(hazards))]...) }

// number writes a number that numeric takes (some of which grow too much
// written out for Harvest).
func (g *gen) number() {
	if g.rng.IntN(2) == 0 {
		g.b = append(g.b, '-')
	}
	switch g.rng.IntN(6) {
	case 0:
		g.b = append(g.b, []string{"0", "0.0", "1e-16383", "9.99e131071", "0.001e131074", "0e1073741822", "1." + strings.Repeat("5", 16383)}[g.rng.IntN(7)]...)
		return
	case 1:
		g.b = strconv.AppendFloat(g.b, g.rng.NormFloat64()*1e6, 'g', -1, 64)
		return
	}
	g.b = strconv.AppendInt(g.b, g.rng.Int64N(1e12), 10)
	if g.rng.IntN(2) == 0 {
		g.b = append(g.b, '.')
		g.b = strconv.AppendInt(g.b, g.rng.Int64N(1e6), 10)
	}
	if g.rng.IntN(3) == 0 {
		g.b = append(g.b, "eE"[g.rng.IntN(2)])
		g.b = strconv.AppendInt(g.b, int64(g.rng.IntN(400)-200), 10)
	}
}

// badNumber writes a number beyond numeric's range.
func (g *gen) badNumber() {
	g.b = append(g.b, []string{
		"1e131072", "0.001e131075", "1.0e-16383", "10e-16384", "0e-16384", "0e1073741823", "1e-1073741823",
		"1e99999999999999999999", "1." + strings.Repeat("0", 16384), "1" + strings.Repeat("0", 131072),
		strconv.Itoa(131072+g.rng.IntN(1e9)) + "e131072", "1e" + strconv.Itoa(131072+g.rng.IntN(1e9)),
		"1e-" + strconv.Itoa(16384+g.rng.IntN(1e9)),
	}[g.rng.IntN(13)]...)
}
