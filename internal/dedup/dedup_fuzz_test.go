package dedup_test

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dedup"
)

// keyErrors are the errors ValidateKey may wrap.
var keyErrors = []error{dedup.ErrKeyEmpty, dedup.ErrKeyTooLong, dedup.ErrKeyText, dedup.ErrKeyReserved}

// keyErrorKind returns the one sentinel of keyErrors err wraps, failing
// the test if it wraps none or several.
func keyErrorKind(t *testing.T, err error) error {
	t.Helper()
	var kind error
	for _, k := range keyErrors {
		if errors.Is(err, k) {
			require.Nil(t, kind, "%v wraps both %v and %v", err, kind, k)
			kind = k
		}
	}
	require.NotNil(t, kind, "unexpected error kind: %v", err)
	return kind
}

// expectedKeyError is the rule ValidateKey documents, written out
// independently of it: after trimming white space, a key is 1 to
// MaxKeyBytes bytes of UTF-8 without U+0000 or any control character, and
// starts with neither reserved prefix; the checks apply in that order.
func expectedKeyError(raw string) error {
	key := strings.TrimSpace(raw)
	switch {
	case key == "":
		return dedup.ErrKeyEmpty
	case len(key) > dedup.MaxKeyBytes:
		return dedup.ErrKeyTooLong
	case !utf8.ValidString(key) || strings.ContainsFunc(key, unicode.IsControl):
		return dedup.ErrKeyText
	case strings.HasPrefix(key, dedup.ReservedKeyPrefix), strings.HasPrefix(key, dedup.HookKeyPrefix):
		return dedup.ErrKeyReserved
	}
	return nil
}

// FuzzValidateKey checks the idempotency key rules on any text a caller
// may send in a header, a query parameter or a body:
//   - the verdict is the documented rule (expectedKeyError), and every
//     refusal wraps exactly one of the four sentinel errors;
//   - an accepted key is the input trimmed, and is stable: validating it
//     again, or validating it with white space around it, gives it back
//     unchanged, so a retry that pads or trims its key keeps its key;
//   - a refusal does not depend on the white space around the key either;
//   - every message is valid UTF-8, since it is sent back in a JSON body.
func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{
		"", " ", "\t\n\v\f\r ", "evt", " evt_123 ", "conn:x", "hook:stripe:evt_1", "conn", "hook", " conn:x",
		strings.Repeat("a", dedup.MaxKeyBytes), strings.Repeat("a", dedup.MaxKeyBytes+1), " " + strings.Repeat("a", dedup.MaxKeyBytes) + " ",
		strings.Repeat("é", dedup.MaxKeyBytes/2+1), strings.Repeat("a", 600),
		"\x00", "evt\x00", "\x00\xff", "evt\xff", "\xed\xa0\x80", "\xc0\xaf", "evt\t1", "evt\u00851", "\u0085evt\u0085",
		"\u00a0evt\u2028", "évt-日本-😀", "\ufeffevt", "18446744073709551616", "-0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		key, err := dedup.ValidateKey(raw)
		want := expectedKeyError(raw)
		if err != nil {
			require.Empty(t, key, "a refused key returns no key")
			require.Equal(t, want, keyErrorKind(t, err), "ValidateKey(%q) = %v", raw, err)
			require.True(t, utf8.ValidString(err.Error()), "message %q is not UTF-8", err.Error())
			_, again := dedup.ValidateKey(strings.TrimSpace(raw))
			require.Equal(t, err.Error(), again.Error(), "the refusal depends on white space around the key")
			return
		}
		require.NoError(t, want, "ValidateKey(%q) accepted a key the rule refuses", raw)
		require.Equal(t, strings.TrimSpace(raw), key)
		require.NotEmpty(t, key)
		require.LessOrEqual(t, len(key), dedup.MaxKeyBytes)

		again, err := dedup.ValidateKey(key)
		require.NoError(t, err, "an accepted key %q is refused when validated again", key)
		require.Equal(t, key, again, "validating an accepted key changes it")
		padded, err := dedup.ValidateKey(" \t" + key + "\r\n")
		require.NoError(t, err)
		require.Equal(t, key, padded, "white space around a key changes it")
	})
}

// FuzzValidateName checks the rule for workflow, activity, task queue and
// signal names, which travel as NATS subject tokens and URL path segments:
//   - a name is accepted exactly when it is 1 to MaxNameBytes bytes of ASCII
//     letters, digits, '_' and '-';
//   - an accepted name is a single subject token (no '.', '*', '>', white
//     space) and is itself a valid idempotency key, returned unchanged;
//   - a refusal wraps ErrInvalidName and its message, which quotes the
//     name, is valid UTF-8 without control characters whatever the name
//     holds.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{
		"", "onboarding", "charge_card-2", "a.b", "a b", "a*", "a>", "orders.>", "é", "a\x00", "\xff", "conn", "hook",
		strings.Repeat("n", dedup.MaxNameBytes), strings.Repeat("n", dedup.MaxNameBytes+1), "-", "_", "0", "a/b", "a\nb", "%2e",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := dedup.ValidateName(name)
		want := name != "" && len(name) <= dedup.MaxNameBytes && !strings.ContainsFunc(name, func(r rune) bool {
			return r != '_' && r != '-' && !('0' <= r && r <= '9') && !('a' <= r && r <= 'z') && !('A' <= r && r <= 'Z')
		})
		if err != nil {
			require.False(t, want, "ValidateName(%q) refused a valid name: %v", name, err)
			require.ErrorIs(t, err, dedup.ErrInvalidName)
			msg := err.Error()
			require.True(t, utf8.ValidString(msg), "message %q is not UTF-8", msg)
			require.False(t, strings.ContainsFunc(msg, unicode.IsControl), "message %q holds a control character", msg)
			return
		}
		require.True(t, want, "ValidateName(%q) accepted an invalid name", name)
		require.False(t, strings.ContainsAny(name, ".*> \t\r\n/"), "%q is not one subject token", name)
		key, err := dedup.ValidateKey(name)
		require.NoError(t, err, "a valid name %q is not a valid key", name)
		require.Equal(t, name, key)
	})
}
