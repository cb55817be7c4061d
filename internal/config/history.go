package config

import (
	"fmt"

	"github.com/harvest-engine/harvest/internal/scheduler"
)

// HistoryLimits are the limits the history_* keys set, for the
// scheduler; zero fields mean its defaults.
func (c Config) HistoryLimits() scheduler.HistoryLimits {
	return scheduler.HistoryLimits{
		WarnEvents: c.HistoryWarnEvents, WarnBytes: c.HistoryWarnBytes,
		MaxEvents: c.HistoryMaxEvents, MaxBytes: c.HistoryMaxBytes,
		SuggestEvents: c.HistorySuggestEvents, SuggestBytes: c.HistorySuggestBytes,
		UpdateMaxInFlight: c.UpdateMaxInFlight, UpdateMaxPerRun: c.UpdateMaxPerRun,
	}
}

// validateHistoryLimits names the first bad history_* key: each is a
// positive number (or unset), and no threshold is above its hard limit,
// defaults counted.
func (c Config) validateHistoryLimits() error {
	for _, k := range []struct {
		key string
		v   int64
	}{
		{"history_warn_events", int64(c.HistoryWarnEvents)}, {"history_warn_bytes", c.HistoryWarnBytes},
		{"history_max_events", int64(c.HistoryMaxEvents)}, {"history_max_bytes", c.HistoryMaxBytes},
		{"history_suggest_events", int64(c.HistorySuggestEvents)}, {"history_suggest_bytes", c.HistorySuggestBytes},
		{"update_max_in_flight", int64(c.UpdateMaxInFlight)}, {"update_max_per_run", int64(c.UpdateMaxPerRun)},
	} {
		if k.v < 0 {
			return fmt.Errorf("config: %s %d: want a positive number", k.key, k.v)
		}
	}
	l := c.HistoryLimits().WithDefaults()
	for _, p := range []struct {
		key, maxKey string
		v, max      int64
	}{
		{"history_warn_events", "history_max_events", int64(l.WarnEvents), int64(l.MaxEvents)},
		{"history_warn_bytes", "history_max_bytes", l.WarnBytes, l.MaxBytes},
		{"history_suggest_events", "history_max_events", int64(l.SuggestEvents), int64(l.MaxEvents)},
		{"history_suggest_bytes", "history_max_bytes", l.SuggestBytes, l.MaxBytes},
	} {
		if p.v > p.max {
			return fmt.Errorf("config: %s %d is above %s %d: a threshold comes before its hard limit, which fails the execution",
				p.key, p.v, p.maxKey, p.max)
		}
	}
	return nil
}
