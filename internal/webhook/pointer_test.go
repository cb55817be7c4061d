package webhook_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/webhook"
)

// rfc6901Doc is the example document of RFC 6901, section 5.
const rfc6901Doc = `{
	"foo": ["bar", "baz"],
	"": 0,
	"a/b": 1,
	"c%d": 2,
	"e^f": 3,
	"g|h": 4,
	"i\\j": 5,
	"k\"l": 6,
	" ": 7,
	"m~n": 8
}`

// TestPointerRFC6901Examples resolves every example of RFC 6901, section 5.
func TestPointerRFC6901Examples(t *testing.T) {
	t.Parallel()
	var doc any
	require.NoError(t, json.Unmarshal([]byte(rfc6901Doc), &doc))
	tests := []struct {
		ptr  string
		want any
	}{
		{ptr: "", want: doc},
		{ptr: "/foo", want: []any{"bar", "baz"}},
		{ptr: "/foo/0", want: "bar"},
		{ptr: "/", want: 0.0},
		{ptr: "/a~1b", want: 1.0},
		{ptr: "/c%d", want: 2.0},
		{ptr: "/e^f", want: 3.0},
		{ptr: "/g|h", want: 4.0},
		{ptr: "/i\\j", want: 5.0},
		{ptr: "/k\"l", want: 6.0},
		{ptr: "/ ", want: 7.0},
		{ptr: "/m~0n", want: 8.0},
	}
	for _, tc := range tests {
		got, err := webhook.Pointer(doc, tc.ptr)
		require.NoError(t, err, tc.ptr)
		require.Equal(t, tc.want, got, tc.ptr)
	}
	for _, ptr := range []string{"/foo/2", "/foo/-", "/foo/-1", "/foo/bar", "/a/b", "foo", "/foo/0/x"} {
		_, err := webhook.Pointer(doc, ptr)
		require.ErrorIs(t, err, webhook.ErrPointer, ptr)
	}
}

// TestPointerRFC6901Strict holds the rest of RFC 6901: "~" only starts
// "~0" or "~1" (section 3), and an array index is "0" or digits without a
// leading zero (section 4).
func TestPointerRFC6901Strict(t *testing.T) {
	t.Parallel()
	var doc any
	require.NoError(t, json.Unmarshal([]byte(rfc6901Doc), &doc))
	for _, ptr := range []string{"/m~n", "/foo/01", "/foo/+1", "/foo/-0", "/foo/00", "/foo/ 1"} {
		_, err := webhook.Pointer(doc, ptr)
		require.ErrorIs(t, err, webhook.ErrPointer, ptr)
	}
}
