package config

import (
	"fmt"
	"io"
	"log/slog"
)

// The values of log_format.
const (
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// Level is the configured log level.
func (c Config) Level() (slog.Level, error) {
	var l slog.Level
	if c.LogLevel == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return l, fmt.Errorf("config: log_level %q: want debug, info, warn or error", c.LogLevel)
	}
	return l, nil
}

// Logger builds a process's logger: text (logfmt) or JSON lines, as
// log_format says, on w (a process's stderr) at the configured level.
func (c Config) Logger(w io.Writer) *slog.Logger {
	l, _ := c.Level()
	opts := &slog.HandlerOptions{Level: l}
	if c.LogFormat == LogFormatJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
