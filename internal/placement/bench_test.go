package placement

import "testing"

func BenchmarkStartShard(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = StartShard(16, "charge", "", "webhook-evt-abc123")
	}
}

func BenchmarkMintWorkflowID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = MintWorkflowID(16, 3, "charge")
	}
}
