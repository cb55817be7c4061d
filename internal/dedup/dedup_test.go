package dedup_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dedup"
)

func TestValidateKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, raw, want string
		err             error
	}{
		{"plain", "evt_123", "evt_123", nil},
		{"trimmed", "  evt_123\t", "evt_123", nil},
		{"empty", "", "", dedup.ErrKeyEmpty},
		{"blank", " \t\n", "", dedup.ErrKeyEmpty},
		{"exactly max", strings.Repeat("k", 512), strings.Repeat("k", 512), nil},
		{"max after trim", " " + strings.Repeat("k", 512) + " ", strings.Repeat("k", 512), nil},
		{"too long", strings.Repeat("k", 513), "", dedup.ErrKeyTooLong},
		{"reserved", "conn:abc", "", dedup.ErrKeyReserved},
		{"webhook namespace", "hook:stripe:evt_1", "", dedup.ErrKeyReserved},
		{"NUL", "evt\x001", "", dedup.ErrKeyText},
		{"not UTF-8", "evt\xff", "", dedup.ErrKeyText},
		{"UTF-8 surrogate", "evt\xed\xa0\x80", "", dedup.ErrKeyText},
		{"inner tab", "evt\t1", "", dedup.ErrKeyText},
		{"inner newline", "evt\n1", "", dedup.ErrKeyText},
		{"C1 control", "evt\u00851", "", dedup.ErrKeyText},
		{"unicode", "évt-日本-😀", "évt-日本-😀", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dedup.ValidateKey(tc.raw)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestActivityKeysAreDistinct(t *testing.T) {
	t.Parallel()
	seen := make(map[dedup.ActivityKey]bool, 10000)
	for range 10000 {
		k := dedup.NewActivityKey()
		require.Len(t, k.String(), 36)
		require.False(t, seen[k], "collision on %s", k)
		seen[k] = true
	}
}

func TestActivityKeyForIsStableAndDistinct(t *testing.T) {
	t.Parallel()
	exec := "01a23850-3557-76a9-bea9-c3af4081c19d"
	k := dedup.ActivityKeyFor(exec, 1)
	require.Equal(t, k, dedup.ActivityKeyFor(exec, 1), "the scheduler and an eager worker derive the same key")
	parsed, err := uuid.Parse(k.String())
	require.NoError(t, err)
	require.Equal(t, uuid.Version(5), parsed.Version())
	seen := map[dedup.ActivityKey]bool{}
	for _, e := range []string{exec, "01a23850-3571-75b6-9e82-e86f4eb9cfdb"} {
		for id := 1; id <= 1000; id++ {
			k := dedup.ActivityKeyFor(e, id)
			require.False(t, seen[k], "collision on %s", k)
			seen[k] = true
		}
	}
	// The id is delimited: execution "…1" with activity 11 is not "…11" with 1.
	require.NotEqual(t, dedup.ActivityKeyFor("x1", 11), dedup.ActivityKeyFor("x11", 1))
}

func TestSubkey(t *testing.T) {
	t.Parallel()
	parent := dedup.ActivityKey("11111111-2222-3333-4444-555555555555")
	other := dedup.ActivityKey("66666666-2222-3333-4444-555555555555")
	require.Equal(t, parent.String()+"/db", parent.Subkey("db").String())
	require.Equal(t, parent.Subkey("db"), parent.Subkey("db"), "deterministic")
	require.NotEqual(t, parent, parent.Subkey("db"))
	require.NotEqual(t, parent.Subkey("db"), parent.Subkey("email"))
	require.NotEqual(t, parent.Subkey("db"), other.Subkey("db"))
	require.Equal(t, parent.String()+"/db/users", parent.Subkey("db").Subkey("users").String())
	require.NotEqual(t, parent.Subkey("a/b"), parent.Subkey("a").Subkey("b"), "a slash in a name is escaped")
	require.Equal(t, parent.String()+"/a%2Fb", parent.Subkey("a/b").String())
	require.Equal(t, parent.String()+"/default", parent.Subkey("").String())
	require.Equal(t, parent.String()+"/caf%C3%A9%20x", parent.Subkey("café x").String())
}

func FuzzSubkey(f *testing.F) {
	f.Add("db", "email")
	f.Add("a/b", "a%2Fb")
	f.Add("", "\x00")
	f.Fuzz(func(t *testing.T, a, b string) {
		parent := dedup.NewActivityKey()
		ka, kb := parent.Subkey(a), parent.Subkey(b)
		for _, k := range []dedup.ActivityKey{ka, kb} {
			s := k.String()
			if !utf8.ValidString(s) || strings.Count(s, "/") != 1 {
				t.Fatalf("subkey %q is not one printable segment", s)
			}
			for _, c := range []byte(s) {
				if c <= ' ' || c >= 0x7f {
					t.Fatalf("subkey %q has a non-printable byte", s)
				}
			}
		}
		if (ka == kb) != (a == b || (a == "" && b == "default") || (a == "default" && b == "")) {
			t.Fatalf("Subkey(%q)=%q, Subkey(%q)=%q", a, ka, b, kb)
		}
	})
}

func TestStartCommandIDs(t *testing.T) {
	t.Parallel()
	require.Equal(t, dedup.StartCommandID("a", "k"), dedup.StartCommandID("a", "k"))
	require.NotEqual(t, dedup.StartCommandID("a", "k"), dedup.StartCommandID("b", "k"))
	require.NotEqual(t, dedup.StartCommandID("ab", "c"), dedup.StartCommandID("a", "bc"), "parts are length-prefixed")
}

func TestValidateName(t *testing.T) {
	t.Parallel()
	require.NoError(t, dedup.ValidateName("onboarding"))
	require.NoError(t, dedup.ValidateName("charge_card-2"))
	for _, bad := range []string{"", "a.b", "a b", "a*", "a>", strings.Repeat("n", 129), "é"} {
		require.ErrorIs(t, dedup.ValidateName(bad), dedup.ErrInvalidName, bad)
	}
}

// A termination's command ids are stable per execution, and distinct
// from other executions' and from other commands'.
func TestCloseCommandIDs(t *testing.T) {
	t.Parallel()
	const a, b = "01a23850-3557-76a9-bea9-c3af4081c19d", "01a23850-3557-76a9-bea9-c3af4081c19e"
	require.Equal(t, dedup.TerminateCommandID(a), dedup.TerminateCommandID(a))
	require.NotEqual(t, dedup.TerminateCommandID(a), dedup.TerminateCommandID(b))
	require.NotEqual(t, dedup.TerminateCommandID(a), dedup.SignalCommandID(a, ""))
}

// A build id is a version, a revision or a hash: dots, '+' and '~' pass,
// what a URL or a query would need to escape does not.
func TestValidateBuildID(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"v1.4.0+75549c2a1b3c.dirty~1a2b3c4d", "devel~00ff00ff", "2026-12-06_1", strings.Repeat("b", 128)} {
		require.NoError(t, dedup.ValidateBuildID(ok), ok)
	}
	for _, bad := range []string{"", "a b", "a/b", "(devel)", "a?b", "é", strings.Repeat("b", 129)} {
		require.ErrorIs(t, dedup.ValidateBuildID(bad), dedup.ErrInvalidBuildID, bad)
	}
}
