package startpolicy_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/startpolicy"
	"github.com/harvest-engine/harvest/internal/wire"
)

func TestParseNamesTheBadMember(t *testing.T) {
	for _, tc := range []struct {
		name  string
		p     api.StartPolicy
		field string
	}{
		{"two policies", api.StartPolicy{Throttle: &api.Throttle{Limit: 1, Period: "1s"}, Debounce: &api.Debounce{Period: "1s"}}, ""},
		{"no limit", api.StartPolicy{Throttle: &api.Throttle{Period: "1s"}}, "throttle.limit"},
		{"a limit too high", api.StartPolicy{Throttle: &api.Throttle{Limit: startpolicy.MaxLimit + 1, Period: "1s"}}, "throttle.limit"},
		{"no period", api.StartPolicy{Throttle: &api.Throttle{Limit: 1}}, "throttle.period"},
		{"a period that is no duration", api.StartPolicy{Debounce: &api.Debounce{Period: "soon"}}, "debounce.period"},
		{"a period too long", api.StartPolicy{Debounce: &api.Debounce{Period: "1000h"}}, "debounce.period"},
		{"a key that is no pointer", api.StartPolicy{Debounce: &api.Debounce{Period: "1s", Key: "customer_id"}}, "debounce.key"},
		{"a bad escape", api.StartPolicy{Batch: &api.Batch{MaxSize: 2, MaxWait: "1s", Key: "/a~2"}}, "batch.key"},
		{"an unknown input choice", api.StartPolicy{Debounce: &api.Debounce{Period: "1s", Input: "middle"}}, "debounce.input"},
		{"a batch too big", api.StartPolicy{Batch: &api.Batch{MaxSize: startpolicy.MaxBatchSize + 1, MaxWait: "1s"}}, "batch.max_size"},
		{"no max_wait", api.StartPolicy{Batch: &api.Batch{MaxSize: 2}}, "batch.max_wait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := startpolicy.Parse(&tc.p)
			var perr *startpolicy.Error
			require.ErrorAs(t, err, &perr)
			require.Equal(t, tc.field, perr.Field)
			require.NotEmpty(t, perr.Message)
		})
	}
	for _, none := range []*api.StartPolicy{nil, {}} {
		p, err := startpolicy.Parse(none)
		require.NoError(t, err)
		require.Nil(t, p)
	}
}

func TestForBindsThePolicyToTheInput(t *testing.T) {
	p, err := startpolicy.Parse(&api.StartPolicy{Throttle: &api.Throttle{Limit: 3, Period: "1m", Key: "/customer/id"}})
	require.NoError(t, err)
	require.Equal(t, wire.PolicyThrottle, p.Kind())
	for input, key := range map[string]string{
		`{"customer": {"id": "cus_1"}}`:              "cus_1",
		`{"customer": {"id": 12345678901234567890}}`: "12345678901234567890",
		`{"customer": {"id": true}}`:                 "true",
	} {
		sp, err := p.For(json.RawMessage(input))
		require.NoError(t, err, input)
		require.Equal(t, &wire.StartPolicy{Kind: wire.PolicyThrottle, Key: key, Limit: 3, Period: time.Minute}, sp)
	}
	for _, input := range []string{``, `[]`, `{"customer": {}}`, `{"customer": {"id": null}}`, `{"customer": {"id": {"a": 1}}}`,
		`{"customer": {"id": "` + string(make([]byte, startpolicy.MaxKeyBytes+1)) + `"}}`} {
		_, err := p.For(json.RawMessage(input))
		require.True(t, errors.Is(err, startpolicy.ErrNoKey), "%q: %v", input, err)
	}
	// No key: the whole workflow is one key.
	whole, err := startpolicy.Parse(&api.StartPolicy{Batch: &api.Batch{MaxSize: 5, MaxWait: "2s"}})
	require.NoError(t, err)
	sp, err := whole.For(nil)
	require.NoError(t, err)
	require.Equal(t, &wire.StartPolicy{Kind: wire.PolicyBatch, MaxSize: 5, MaxWait: 2 * time.Second}, sp)
}

// TestPlaceMakesAWebhookStartOneUnderThePolicy: a rule's keyed start
// loses its key (the command id, derived from the event's, dedupes it)
// and goes to the shard of its policy key, with a workflow_id minted
// there.
func TestPlaceMakesAWebhookStartOneUnderThePolicy(t *testing.T) {
	p, err := startpolicy.Parse(&api.StartPolicy{Debounce: &api.Debounce{Period: "30s", Key: "/customer_id", Input: api.DebounceInputFirst}})
	require.NoError(t, err)
	const shards = 16
	cmd := &wire.Command{CommandID: dedup.StartCommandID("charge", "hook:stripe:evt_1"), Kind: wire.KindStart, Start: &wire.StartCommand{
		WorkflowName: "charge", WorkflowID: "w", Input: json.RawMessage(`{"customer_id": "cus_9"}`),
		IdempotencyKey: "hook:stripe:evt_1", Fingerprint: "f", RejectFingerprintMismatch: true,
	}}
	id := cmd.CommandID
	shard, err := p.Place(cmd, placement.Single(shards))
	require.NoError(t, err)
	require.Equal(t, id, cmd.CommandID)
	require.Empty(t, cmd.Start.IdempotencyKey)
	require.Empty(t, cmd.Start.Fingerprint)
	require.False(t, cmd.Start.RejectFingerprintMismatch)
	require.Equal(t, &wire.StartPolicy{Kind: wire.PolicyDebounce, Key: "cus_9", Period: 30 * time.Second, FirstInput: true}, cmd.Start.Policy)
	want, err := startpolicy.Shard(placement.Single(shards), "charge", cmd.Start.Policy)
	require.NoError(t, err)
	require.Equal(t, want, shard)
	require.Equal(t, shard, placement.StartShard(shards, "charge", cmd.Start.WorkflowID, ""), "the workflow_id routes to the same shard")
	require.True(t, cmd.Start.WorkflowIDMinted)

	_, err = p.Place(&wire.Command{Kind: wire.KindStart, Start: &wire.StartCommand{WorkflowName: "charge", Input: json.RawMessage(`{}`)}}, placement.Single(shards))
	require.ErrorIs(t, err, startpolicy.ErrNoKey)
}
