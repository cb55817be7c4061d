package dedup

import "testing"

func BenchmarkStartCommandID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = StartCommandID("charge", "webhook-evt-abc123")
	}
}

func BenchmarkActivityKeySubkey(b *testing.B) {
	key := NewActivityKey()
	b.ReportAllocs()
	for b.Loop() {
		_ = key.Subkey("db").String()
	}
}

func BenchmarkFingerprint(b *testing.B) {
	input := []byte(`{"amount_cents": 500, "customer_id": "cus_1", "metadata": {"order": "42", "items": [1, 2, 3]}}`)
	b.ReportAllocs()
	for b.Loop() {
		_ = Fingerprint(input)
	}
}
