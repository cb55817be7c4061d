package callback_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/callback"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// hostsResolver answers from a fixed table, and for any other name what a
// resolver at 10.53.0.1 says of a name that does not exist.
type hostsResolver map[string][]string

func (h hostsResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	addrs, ok := h[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, Server: "10.53.0.1:53", IsNotFound: true}
	}
	out := make([]net.IPAddr, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, net.IPAddr{IP: net.ParseIP(a)})
	}
	return out, nil
}

// TestCallbackRefusalsNameNoResolvedAddress: a start whose
// completion_callback names an internal host is refused with the category
// of what the host resolves to, never the address, so a start token
// cannot map internal names; the log keeps the address.
func TestCallbackRefusalsNameNoResolvedAddress(t *testing.T) {
	t.Parallel()
	log := &stacktest.LogTail{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the stack's log:\n%s", log)
		}
	})
	s := stacktest.Start(t, devstack.Config{
		Logger: slog.New(slog.NewTextHandler(log, nil)),
		Ingest: ingest.Config{CallbackPolicy: callback.Policy{Resolver: hostsResolver{
			"vm":          {"127.0.0.1"},
			"db.internal": {"10.1.2.3"},
			"imds":        {"169.254.169.254"},
		}}},
	})
	for target, want := range map[string]string{
		"http://vm/x":               `callback target rejected: host "vm" resolves to a private address`,
		"http://db.internal:5432/x": `callback target rejected: host "db.internal" resolves to a private address`,
		"http://imds/latest":        `callback target rejected: host "imds" resolves to a private address`,
		"http://nowhere.test/x":     `callback target rejected: host "nowhere.test": name does not resolve`,
	} {
		r := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "completion_callback": "`+target+`"}`)
		require.Equal(t, 422, r.Status, "%s: %v", target, r.Body)
		require.Equal(t, map[string]any{"error": "callback_rejected", "message": want, "field": "completion_callback"}, r.Body, target)
	}
	require.Zero(t, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
	for _, detail := range []string{"127.0.0.1", "10.1.2.3", "169.254.169.254", "10.53.0.1:53"} {
		require.Contains(t, log.String(), detail, "the log keeps what the API does not say")
	}
}

// TestCallbackLastErrorNamesOnlyTheCategory: a failed delivery's
// last_error, which the API shows whoever started the execution, says
// "connection refused" or "name does not resolve", not Go's dial error or
// the resolver's address. And a host allow-listed by name that resolves,
// at delivery, to the metadata address is not delivered to: the address
// dialled is checked, not just the name.
func TestCallbackLastErrorNamesOnlyTheCategory(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)
	port := strconv.Itoa(receiver.Listener.Addr().(*net.TCPAddr).Port)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedPort := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	require.NoError(t, l.Close())

	log := &stacktest.LogTail{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the stack's log:\n%s", log)
		}
	})
	allow := []string{"127.0.0.0/8", "hook.internal"}
	s := stacktest.Start(t, devstack.Config{
		Logger: slog.New(slog.NewTextHandler(log, nil)),
		// Ingest sees every name on loopback.
		Ingest: ingest.Config{CallbackPolicy: callback.Policy{AllowHosts: allow, Resolver: hostsResolver{
			"down.test": {"127.0.0.1"}, "gone.test": {"127.0.0.1"}, "hook.internal": {"127.0.0.1"},
		}}},
		// By delivery, gone.test has left the DNS and hook.internal
		// answers the metadata address beside the receiver's.
		Scheduler: scheduler.Config{
			CallbackPolicy: callback.Policy{AllowHosts: allow, Resolver: hostsResolver{
				"down.test": {"127.0.0.1"}, "hook.internal": {"127.0.0.1", "169.254.169.254"},
			}},
			CallbackPollInterval: 20 * time.Millisecond,
			CallbackMaxAttempts:  1,
		},
	})
	c, err := client.New(client.Config{BaseURL: s.URL()})
	require.NoError(t, err)
	ctx := natstest.Context(t)

	want := map[string]string{
		"http://down.test:" + closedPort + "/x": "connection refused",
		"http://gone.test:" + port + "/x":       "name does not resolve",
		"http://hook.internal:" + port + "/x":   `host "hook.internal" resolves to a private address`,
	}
	ids := map[string]string{}
	for target := range want {
		r := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "completion_callback": "`+target+`"}`)
		require.Equal(t, 201, r.Status, "%s: %v", target, r.Body)
		ids[target] = r.Body["execution_id"].(string)
	}
	for target, id := range ids {
		var cb *client.CallbackDelivery
		probe.Until(t, 60*time.Second, "the callback to "+target+" to fail", func() bool {
			e, err := c.Describe(ctx, id)
			require.NoError(t, err)
			cb = e.CompletionCallback
			return cb != nil && cb.Status == client.CallbackFailed
		})
		require.Equal(t, want[target], cb.LastError, target)
		require.Equal(t, 1, cb.Attempts, target)
	}
	require.Zero(t, hits.Load(), "a name resolving to the metadata address was delivered to")
	for _, detail := range []string{"169.254.169.254", "10.53.0.1:53", "connect: connection refused"} {
		require.Contains(t, log.String(), detail, "the log keeps what last_error does not say")
	}
}
