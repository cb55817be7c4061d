package ingest_test

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestAnOversizedBodyIsRefusedUnread: a 100 MB body, announced or
// streamed, is answered 413 payload_too_large before anything is
// published. (e2e.TestIngestRefusesHugeBodiesWithFlatMemory measures an
// ingest process's memory meanwhile.)
func TestAnOversizedBodyIsRefusedUnread(t *testing.T) {
	s := stacktest.Start(t, devstack.Config{})
	ctx := natstest.Context(t)
	const size = 100 << 20
	post := func(chunked bool) (int, map[string]any) {
		body := io.LimitReader(rand.Reader, size)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/api/harvest/workflows/onboarding/start", body)
		require.NoError(t, err)
		if !chunked {
			req.ContentLength = size
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			// The server may close the connection while the rest of a
			// streamed body is still being sent.
			return 0, nil
		}
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return resp.StatusCode, out
	}
	status, out := post(false)
	require.Equal(t, http.StatusRequestEntityTooLarge, status)
	require.Equal(t, "payload_too_large", out["error"])
	require.EqualValues(t, ingest.DefaultMaxBodyBytes, out["limit"])

	for i := range 4 {
		status, out := post(i%2 == 1)
		if status != 0 {
			require.Equal(t, http.StatusRequestEntityTooLarge, status, out)
		}
	}
	var executions int
	require.NoError(t, s.DB.QueryRow(ctx, `SELECT count(*) FROM executions`).Scan(&executions))
	require.Zero(t, executions, "nothing was started")
}

// TestTheAPIBoundsWhatItServesAtOnce: past max_in_flight a request is
// answered 503 with Retry-After at once; health checks still answer; and
// every answer carries an X-Request-Id.
func TestTheAPIBoundsWhatItServesAtOnce(t *testing.T) {
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{MaxInFlight: 2}})
	ctx := natstest.Context(t)
	addr := strings.TrimPrefix(s.URL(), "http://")

	// Two requests whose bodies never finish hold both slots.
	hold := func() net.Conn {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = fmt.Fprintf(conn, "POST /api/harvest/workflows/onboarding/start HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
		require.NoError(t, err)
		return conn
	}
	held := []net.Conn{hold(), hold()}
	// answered says whether the server answered a held request: one the
	// server took after a probe below had a slot was refused 503, and is
	// sent again.
	answered := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		n, _ := c.Read(make([]byte, 1))
		_ = c.SetReadDeadline(time.Time{})
		return n > 0
	}
	// answer is what get keeps of a response, whose body it has read and
	// closed.
	type answer struct {
		StatusCode int
		Header     http.Header
	}
	get := func(path, requestID string) answer {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+path, nil)
		require.NoError(t, err)
		if requestID != "" {
			req.Header.Set("X-Request-Id", requestID)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return answer{StatusCode: resp.StatusCode, Header: resp.Header}
	}
	var resp answer
	statuses := map[int]int{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("GET /api/harvest/executions answered, by status: %v; the held requests: %s", statuses, heldState(held))
		}
	})
	probe.Until(t, 30*time.Second, "both slots to be held", func() bool {
		for i, c := range held {
			if answered(c) {
				_ = c.Close()
				held[i] = hold()
			}
		}
		resp = get("/api/harvest/executions", "")
		statuses[resp.StatusCode]++
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"))
	require.Equal(t, http.StatusOK, get("/healthz", "").StatusCode, "health checks are always served")

	for _, c := range held {
		require.NoError(t, c.Close())
	}
	probe.Until(t, 10*time.Second, "the slots to be free", func() bool {
		resp = get("/api/harvest/executions", "trace-42.a:b/c")
		return resp.StatusCode == http.StatusOK
	})
	require.Equal(t, "trace-42.a:b/c", resp.Header.Get("X-Request-Id"), "the caller's id is echoed")
	resp = get("/api/harvest/executions", "bad id\u00e9")
	require.Len(t, resp.Header.Get("X-Request-Id"), 32, "an unusable id is replaced")
}

// TestSlowClientsDoNotStopOthers: 300 connections that never finish their
// headers hold none of the 20 slots; 20 clients at once are served
// meanwhile.
func TestSlowClientsDoNotStopOthers(t *testing.T) {
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{MaxInFlight: 20}})
	ctx := natstest.Context(t)
	addr := strings.TrimPrefix(s.URL(), "http://")
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for range 300 {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		conns = append(conns, conn)
		_, err = io.WriteString(conn, "GET /api/harvest/exec")
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/api/harvest/workflows/onboarding/start",
				strings.NewReader(fmt.Sprintf(`{"input": {"user_id": %d}}`, i)))
			if !assertNoErr(t, err) {
				return
			}
			req.Header.Set("Idempotency-Key", fmt.Sprintf("slow-clients-%d", i))
			resp, err := http.DefaultClient.Do(req)
			if !assertNoErr(t, err) {
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
				t.Errorf("start %d: %s", i, resp.Status)
			}
		})
	}
	wg.Wait()
	// The slow connections are still open, and answer nothing yet.
	require.NoError(t, conns[0].SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	_, err := bufio.NewReader(conns[0]).ReadByte()
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "a connection still sending its headers is waited for, up to the read-header timeout")
}

func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// TestNoAnswerQuotesAnInternalError: a completion_callback whose host
// does not resolve is answered without the resolver's error (which names
// the resolver's address), and with a request id.
func TestNoAnswerQuotesAnInternalError(t *testing.T) {
	s := stacktest.Start(t, devstack.Config{})
	ctx := natstest.Context(t)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/api/harvest/workflows/onboarding/start",
		strings.NewReader(`{"input": {"user_id": 1}, "completion_callback": "https://no-such-host.invalid/done"}`))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	t.Logf("%s: %s", resp.Status, body)
	require.NotEqual(t, http.StatusCreated, resp.StatusCode)
	for _, leak := range []string{"lookup", ":53", "dial", "SQLSTATE", "nats:"} {
		require.NotContains(t, string(body), leak)
	}
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"))
}

// heldState says, for a failed test, whether the server answered (or
// closed) the requests meant to hold the slots.
func heldState(conns []net.Conn) string {
	var out []string
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		buf := make([]byte, 200)
		n, err := c.Read(buf)
		out = append(out, fmt.Sprintf("%d: read %q, %v", i, buf[:n], err))
	}
	return strings.Join(out, "; ")
}
