package dedup_test

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dedup"
)

// connKey is a decoded binding key: either coordinates or a message id.
type connKey struct {
	binding, stream string
	seq             uint64
	msgID           string
	byID            bool
}

// parseConnKey decodes what ConnKey and ConnMsgIDKey produce. Decoding
// every key back to its parts is the proof that no two parts give one key.
func parseConnKey(key string) (connKey, error) {
	rest, ok := strings.CutPrefix(key, "conn:")
	if !ok {
		return connKey{}, errors.New("no conn: prefix")
	}
	field := func() (string, error) {
		n, after, ok := strings.Cut(rest, ":")
		if !ok {
			return "", errors.New("no length")
		}
		l, err := strconv.Atoi(n)
		if err != nil || l < 0 || l > len(after) || strconv.Itoa(l) != n {
			return "", fmt.Errorf("bad length %q", n)
		}
		if len(after) < l+1 || after[l] != ':' {
			return "", errors.New("no separator after the field")
		}
		rest = after[l+1:]
		return after[:l], nil
	}
	var k connKey
	var err error
	if k.binding, err = field(); err != nil {
		return k, err
	}
	if id, ok := strings.CutPrefix(rest, "id:"); ok {
		k.msgID, k.byID = id, true
		return k, nil
	}
	if k.stream, err = field(); err != nil {
		return k, err
	}
	if k.seq, err = strconv.ParseUint(rest, 10, 64); err != nil || strconv.FormatUint(k.seq, 10) != rest {
		return k, fmt.Errorf("bad sequence %q", rest)
	}
	return k, nil
}

func TestConnKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, "conn:6:orders:6:ORDERS:42", dedup.ConnKey("orders", "ORDERS", 42))
	require.Equal(t, "conn:6:orders:id:evt-1", dedup.ConnMsgIDKey("orders", "evt-1"))
	require.Equal(t, "conn:0::0::0", dedup.ConnKey("", "", 0))
	require.Equal(t, "conn:0::id:", dedup.ConnMsgIDKey("", ""))

	// Components that would run together without their lengths.
	for _, pair := range [][2][3]any{
		{{"a:1", "b", uint64(2)}, {"a", "1:b", uint64(2)}},
		{{"a", "b:1", uint64(2)}, {"a", "b", uint64(12)}},
		{{"ab", "c", uint64(1)}, {"a", "bc", uint64(1)}},
		{{"1:a", "", uint64(1)}, {"", "a:1", uint64(1)}},
	} {
		a, b := pair[0], pair[1]
		require.NotEqual(t,
			dedup.ConnKey(a[0].(string), a[1].(string), a[2].(uint64)),
			dedup.ConnKey(b[0].(string), b[1].(string), b[2].(uint64)), "%v vs %v", a, b)
	}
	// A message id never looks like coordinates, nor one binding's id like
	// another's.
	require.NotEqual(t, dedup.ConnKey("orders", "ORDERS", 1), dedup.ConnMsgIDKey("orders", "6:ORDERS:1"))
	require.NotEqual(t, dedup.ConnMsgIDKey("a", "b:id:c"), dedup.ConnMsgIDKey("a:id:b", "c"))

	// API callers cannot send these keys.
	for _, k := range []string{dedup.ConnKey("orders", "ORDERS", 1), dedup.ConnMsgIDKey("orders", "evt-1")} {
		_, err := dedup.ValidateKey(k)
		require.ErrorIs(t, err, dedup.ErrKeyReserved)
	}
}

func TestConnKeysOfDistinctCoordinatesDiffer(t *testing.T) {
	t.Parallel()
	names := []string{"", "a", "b", "ab", "a:", ":a", "1", "1:", "a:1", "1:a", "id", "id:", "a:id:1", "0:"}
	seen := map[string][3]any{}
	for _, b := range names {
		for _, s := range names {
			for _, q := range []uint64{0, 1, 10, 11, 101, math.MaxUint64} {
				k := dedup.ConnKey(b, s, q)
				if prev, ok := seen[k]; ok {
					t.Fatalf("%q from %v and %v", k, prev, [3]any{b, s, q})
				}
				seen[k] = [3]any{b, s, q}
			}
			k := dedup.ConnMsgIDKey(b, s)
			if prev, ok := seen[k]; ok {
				t.Fatalf("%q from %v and msg id %v", k, prev, [2]string{b, s})
			}
			seen[k] = [3]any{b, s, "id"}
		}
	}
}

func FuzzConnKey(f *testing.F) {
	f.Add("orders", "ORDERS", uint64(42), "orders", "ORDERS", uint64(42), "evt-1")
	f.Add("a:1", "b", uint64(2), "a", "1:b", uint64(2), "6:ORDERS:1")
	f.Add("", "", uint64(0), "", "", uint64(0), "")
	f.Add("a", "b:1", uint64(2), "a", "b", uint64(12), "id:x")
	f.Fuzz(func(t *testing.T, b1, s1 string, q1 uint64, b2, s2 string, q2 uint64, id string) {
		k1, k2 := dedup.ConnKey(b1, s1, q1), dedup.ConnKey(b2, s2, q2)
		same := b1 == b2 && s1 == s2 && q1 == q2
		if (k1 == k2) != same {
			t.Fatalf("ConnKey(%q, %q, %d) = %q, ConnKey(%q, %q, %d) = %q", b1, s1, q1, k1, b2, s2, q2, k2)
		}
		got, err := parseConnKey(k1)
		if err != nil || got != (connKey{binding: b1, stream: s1, seq: q1}) {
			t.Fatalf("%q decodes to %+v, %v", k1, got, err)
		}
		ik1, ik2 := dedup.ConnMsgIDKey(b1, id), dedup.ConnMsgIDKey(b2, id)
		if (ik1 == ik2) != (b1 == b2) {
			t.Fatalf("ConnMsgIDKey(%q, %q) = %q, ConnMsgIDKey(%q, %q) = %q", b1, id, ik1, b2, id, ik2)
		}
		if ik1 == k1 || ik1 == k2 {
			t.Fatalf("message id key %q equals coordinates key", ik1)
		}
		got, err = parseConnKey(ik1)
		if err != nil || got != (connKey{binding: b1, msgID: id, byID: true}) {
			t.Fatalf("%q decodes to %+v, %v", ik1, got, err)
		}
		// No caller may send a connector's key: it is refused, for its
		// reserved prefix, its length, or bytes no key may hold (names from
		// outside the configuration, which validates them, only).
		if _, err := dedup.ValidateKey(k1); !errors.Is(err, dedup.ErrKeyReserved) && !errors.Is(err, dedup.ErrKeyTooLong) && !errors.Is(err, dedup.ErrKeyText) {
			t.Fatalf("ValidateKey(%q) = %v: want it refused", k1, err)
		}
	})
}

func ExampleConnKey() {
	// A message without Nats-Msg-Id, at sequence 42 of stream ORDERS, taken
	// by the binding "orders":
	fmt.Println(dedup.ConnKey("orders", "ORDERS", 42))
	// The same binding's message with Nats-Msg-Id "evt-1":
	fmt.Println(dedup.ConnMsgIDKey("orders", "evt-1"))
	// Output:
	// conn:6:orders:6:ORDERS:42
	// conn:6:orders:id:evt-1
}
