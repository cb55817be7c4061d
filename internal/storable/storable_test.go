package storable_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestCheckJSON(t *testing.T) {
	t.Parallel()
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, tc := range []struct {
		name, doc, problem, pointer string
	}{
		{"object", `{"a": [1, "x", true, false, null, {"b": {}}], "c": -0.5e-3}`, "", ""},
		{"scalar", ` "x" `, "", ""},
		{"escapes", `"\" \\ \/ \b \f \n \r \t \u00e9 \ud83d\ude00 \uFFFF \u0001"`, "", ""},
		{"utf-8", `{"naïve": "日本 😀"}`, "", ""},
		{"max depth", deep(storable.MaxDepth), "", ""},
		{"depth over", deep(storable.MaxDepth + 1), storable.ProblemDepth, "/" + strings.TrimSuffix(strings.Repeat("0/", storable.MaxDepth), "/")},
		{"NUL escape", `{"a": {"b": ["x", "y\u0000"]}}`, storable.ProblemNUL, "/a/b/1"},
		{"NUL raw", "{\"a\": \"x\x00\"}", storable.ProblemNUL, "/a"},
		{"NUL in a name", `{"a": {"b\u0000c": 1}}`, storable.ProblemNUL, "/a/b\x00c"},
		{"lone high", `["\ud800"]`, storable.ProblemSurrogate, "/0"},
		{"high then text", `["\ud800x"]`, storable.ProblemSurrogate, "/0"},
		{"high high", `["\ud800\ud800"]`, storable.ProblemSurrogate, "/0"},
		{"lone low", `{"k": "\udc00"}`, storable.ProblemSurrogate, "/k"},
		{"reversed pair", `"\udc00\ud800"`, storable.ProblemSurrogate, ""},
		{"surrogate in a name", `{"\ud800": 1}`, storable.ProblemSurrogate, "/\ufffd"},
		{"invalid UTF-8", "{\"a\": \"\xff\"}", storable.ProblemInvalidUTF8, "/a"},
		{"UTF-8 surrogate", "[\"\xed\xa0\x80\"]", storable.ProblemInvalidUTF8, "/0"},
		{"overlong", "[\"\xc0\xaf\"]", storable.ProblemInvalidUTF8, "/0"},
		{"pointer escapes", `{"a/b": {"c~d": "\u0000"}}`, storable.ProblemNUL, "/a~1b/c~0d"},
		{"exponent", `{"n": 1e1000000}`, storable.ProblemNumber, "/n"},
		{"zero, huge exponent", `0e1073741822`, "", ""},
		{"zero, exponent at INT_MAX/2", `0e1073741823`, storable.ProblemNumber, ""},
		{"zero, negative exponent", `0e-1073741822`, storable.ProblemNumber, ""},
		{"weight at the limit", `9.99e131071`, storable.ProblemNumberGrowth, ""},
		{"weight over", `1e131072`, storable.ProblemNumber, ""},
		{"fraction shifts the weight", `0.001e131074`, storable.ProblemNumberGrowth, ""},
		{"fraction shifts it over", `0.001e131075`, storable.ProblemNumber, ""},
		{"scale at the limit", `1e-16383`, "", ""},
		{"zero's scale at the limit", `0.0e-16382`, "", ""},
		{"scale over", `1.0e-16383`, storable.ProblemNumber, ""},
		{"scale counts the text", `10e-16384`, storable.ProblemNumber, ""},
		{"zero's scale", `0.0e-16383`, storable.ProblemNumber, ""},
		{"digits after the point", "1." + strings.Repeat("0", 16383), "", ""},
		{"too many after the point", "1." + strings.Repeat("0", 16384), storable.ProblemNumber, ""},
		{"digits before the point", strings.Repeat("9", 131072), "", ""},
		{"digits before the point, grown", "9" + strings.Repeat("0", 60000) + "e70000", storable.ProblemNumberGrowth, ""},
		{"growth at the limit", "[1e65535, 1e65535]", storable.ProblemNumberGrowth, "/1"},
		{"growth below the limit", "[1e32768, 1e32760]", "", ""},
		{"growth of small numbers adds up", "[" + strings.TrimSuffix(strings.Repeat("5e-324,", 300), ",") + "]", storable.ProblemNumberGrowth, "/204"},
		{"growth of negative exponents", "[1e-16383, 1e-16383, 1e-16383, 1e-16383, 1e-16383]", storable.ProblemNumberGrowth, "/4"},
		{"float64 extremes", "[1.7976931348623157e308, 5e-324, -2.2250738585072014e-308]", "", ""},
		{"zeros do not grow", "[0e1073741822, -0, 0.0]", "", ""},
		{"too many before the point", "1" + strings.Repeat("0", 131072), storable.ProblemNumber, ""},
		{"exponent overflows int64", `1e99999999999999999999999`, storable.ProblemNumber, ""},
		{"empty", ``, storable.ProblemSyntax, ""},
		{"leading zero", `01`, storable.ProblemSyntax, ""},
		{"trailing comma", `[1,]`, storable.ProblemSyntax, "/1"},
		{"two values", `1 2`, storable.ProblemSyntax, ""},
		{"raw control", "\"\x01\"", storable.ProblemSyntax, ""},
		{"bad escape", `"\x"`, storable.ProblemSyntax, ""},
		{"short unicode escape", `"\u12"`, storable.ProblemSyntax, ""},
		{"unterminated", `{"a": "b`, storable.ProblemSyntax, "/a"},
		{"no member name", `{"a": {1: 2}}`, storable.ProblemSyntax, "/a"},
		{"no member name after a comma", `[{"a": 1, }]`, storable.ProblemSyntax, "/0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := storable.CheckJSON([]byte(tc.doc))
			if tc.problem == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, storable.ErrUnstorable)
			var se *storable.Error
			require.True(t, errors.As(err, &se))
			require.Equal(t, tc.problem, se.Problem, se.Error())
			require.Equal(t, tc.pointer, se.Pointer, se.Error())
		})
	}
}

func TestErrorMessages(t *testing.T) {
	t.Parallel()
	err := storable.CheckJSON([]byte(`{"a": {"b": "\u0000"}}`))
	require.EqualError(t, err, `at /a/b: string holds U+0000 (\u0000), which Harvest cannot store`)
	err = storable.CheckJSON([]byte(`{"a\u0000": 1}`))
	require.EqualError(t, err, `at "/a\x00": member name holds U+0000 (\u0000), which Harvest cannot store`)
	err = storable.CheckJSON([]byte(`[1e1000000]`))
	require.EqualError(t, err, `at /0: number 1e1000000 is out of PostgreSQL numeric's range (more than 131072 digits before the decimal point), which Harvest cannot store`)
	err = storable.CheckIdentifier("order\n1")
	require.EqualError(t, err, `holds the control character U+000A at byte 5`)
	require.Len(t, storable.DisplayPointer(strings.Repeat("/a", 500)), 200+len("…"))
}

func TestCheckText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s                  string
		text, identifier   string // problems; "" when accepted
		identifierOnlyText bool
	}{
		{s: "order-42"},
		{s: "naïve 日本 😀"},
		{s: "a\x00b", text: storable.ProblemNUL, identifier: storable.ProblemNUL},
		{s: "a\xffb", text: storable.ProblemInvalidUTF8, identifier: storable.ProblemInvalidUTF8},
		{s: "\xed\xa0\x80", text: storable.ProblemInvalidUTF8, identifier: storable.ProblemInvalidUTF8},
		{s: "tab\there", identifier: storable.ProblemControl},
		{s: "del\x7f", identifier: storable.ProblemControl},
		{s: "c1\u0085", identifier: storable.ProblemControl},
		{s: "nbsp\u00a0"},
	} {
		problem := func(err error) string {
			var se *storable.Error
			if errors.As(err, &se) {
				return se.Problem
			}
			require.NoError(t, err)
			return ""
		}
		require.Equal(t, tc.text, problem(storable.CheckText(tc.s)), "CheckText(%q)", tc.s)
		require.Equal(t, tc.identifier, problem(storable.CheckIdentifier(tc.s)), "CheckIdentifier(%q)", tc.s)
	}
}

func TestCheckJSONDoesNotAllocate(t *testing.T) {
	doc := []byte(`{"a": [1, 2.5e10, "x\u00e9\ud83d\ude00", {"b": null, "c": [true, false]}], "d": "日本"}`)
	allocs := testing.AllocsPerRun(100, func() {
		if err := storable.CheckJSON(doc); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}
