package dedup

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Fingerprint is the SHA-256, in hex, of the canonical form of a JSON
// value: object keys sorted, insignificant white space dropped, numbers
// kept as written. Two inputs that differ only in formatting or key order
// have the same fingerprint. An absent input and JSON null are the same;
// an unparsable input is fingerprinted as its raw bytes.
func Fingerprint(raw json.RawMessage) string {
	canon := canonicalJSON(raw)
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:])
}

func canonicalJSON(raw json.RawMessage) []byte {
	if len(bytes.TrimSpace(raw)) == 0 {
		return []byte("null")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return raw
	}
	// encoding/json writes map keys sorted and json.Number as written.
	out, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return out
}
