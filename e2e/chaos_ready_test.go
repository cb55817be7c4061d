//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/harvest-engine/harvest/client"
)

// readiness checks that once every command of the trial is applied,
// every live ingest, scheduler and worker says so within the bound: its
// /readyz answers 200 "ready", and ingest's lists no failing shard. A
// stale shard failure mark, or a readiness that lags the recovery it
// reports on, fails the trial.
func (c *trialCheck) readiness(ctx context.Context) {
	began := time.Now()
	dctx, cancel := context.WithTimeout(ctx, c.cfg.bound)
	defer cancel()
	var unready map[string]string
	err := pollUntil(dctx, 200*time.Millisecond, func() bool {
		asked := c.st.unready(dctx)
		if dctx.Err() == nil || unready == nil {
			// What the processes said; not the requests the deadline cut.
			unready = asked
		}
		return len(asked) == 0
	})
	if err != nil {
		names := make([]string, 0, len(unready))
		for name := range unready {
			names = append(names, name)
		}
		slices.Sort(names)
		var said []string
		for _, name := range names {
			said = append(said, name+": "+unready[name])
		}
		c.res.fail("readiness: %d process(es) not ready %s after every command was applied: %s",
			len(unready), c.cfg.bound, strings.Join(said, "; "))
		return
	}
	c.res.ReadyAfter = time.Since(began)
}

// unready asks every running service's /readyz and returns what each one
// that is not ready answered.
func (s *stack) unready(ctx context.Context) map[string]string {
	out := map[string]string{}
	for _, p := range slices.Concat(s.ingests, s.scheds, s.workers) {
		if p.readyURL == "" || !p.running() {
			continue
		}
		if why := askReady(ctx, s.client, p.readyURL); why != "" {
			out[p.name()] = why
		}
	}
	return out
}

// askReady returns why the /readyz at url does not say ready, or "".
func askReady(ctx context.Context, hc *http.Client, url string) string {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	var body client.ReadinessResponse
	if err := json.Unmarshal(raw, &body); err != nil {
		return fmt.Sprintf("%d, not JSON: %s", resp.StatusCode, raw)
	}
	if resp.StatusCode != http.StatusOK || body.Status != client.ReadyStatusReady || len(body.FailingShards) > 0 {
		return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(raw)))
	}
	return ""
}
