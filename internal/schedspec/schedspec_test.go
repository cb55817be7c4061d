package schedspec_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/schedspec"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// utc parses an RFC 3339 time, for tables.
func utc(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return v.UTC()
}

func ptr(t time.Time) *time.Time { return &t }

func mustParse(t testing.TB, s api.ScheduleSpec) *schedspec.Spec {
	t.Helper()
	spec, err := schedspec.Parse(s)
	require.NoError(t, err)
	return spec
}

// fires lists the nominal times after from, up to and including to.
func fires(t testing.TB, spec *schedspec.Spec, from, to time.Time) []time.Time {
	t.Helper()
	var out []time.Time
	for at := from; ; {
		next, ok := spec.Next(at)
		if !ok || next.After(to) {
			return out
		}
		require.True(t, next.After(at), "Next(%s) = %s is not after it", at, next)
		require.Equal(t, time.UTC, next.Location())
		out = append(out, next)
		at = next
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		spec    api.ScheduleSpec
		code    string
		field   string
		message string // a part of the message
	}{
		{"nothing", api.ScheduleSpec{}, api.CodeInvalidScheduleSpec, "spec", "spec.cron or spec.every"},
		{"empty cron list", api.ScheduleSpec{Cron: []string{}}, api.CodeInvalidScheduleSpec, "spec", "spec.cron or spec.every"},
		{"empty expression", api.ScheduleSpec{Cron: []string{"  "}}, api.CodeInvalidScheduleSpec, "spec.cron[0]", "empty"},
		{"hour out of range", api.ScheduleSpec{Cron: []string{"0 25 * * *"}}, api.CodeInvalidScheduleSpec, "spec.cron[0]", `hour field "25": end of range (25) above maximum (23)`},
		{"second expression", api.ScheduleSpec{Cron: []string{"* * * * *", "61 * * * *"}}, api.CodeInvalidScheduleSpec, "spec.cron[1]", `minute field "61"`},
		{"seconds field", api.ScheduleSpec{Cron: []string{"70 * * * * *"}}, api.CodeInvalidScheduleSpec, "spec.cron[0]", `second field "70"`},
		{"day of month", api.ScheduleSpec{Cron: []string{"0 0 0 * *"}}, api.CodeInvalidScheduleSpec, "spec.cron[0]", `day-of-month field "0"`},
		{"month name", api.ScheduleSpec{Cron: []string{"0 0 1 foo *"}}, api.CodeInvalidScheduleSpec, "spec.cron[0]", `month field "foo"`},
		{"day of week", api.ScheduleSpec{Cron: []string{"0 0 * * 8"}}, api.CodeInvalidScheduleSpec, "spec.cron[0]", `day-of-week field "8"`},
		{"commas alone", api.ScheduleSpec{Cron: []string{"0 0 1 , 0"}}, api.CodeInvalidScheduleSpec, "spec.cron[0]", `month field "," allows no value`},
		{"commas alone, seconds", api.ScheduleSpec{Cron: []string{",, 0 0 1 * 0"}}, api.CodeInvalidScheduleSpec, "spec.cron[0]", `second field ",," allows no value`},
		{"too few fields", api.ScheduleSpec{Cron: []string{"* * * *"}}, api.CodeInvalidScheduleSpec, "spec.cron[0]", "expected 5 fields (or 6, with seconds first), found 4"},
		{"too many fields", api.ScheduleSpec{Cron: []string{"* * * * * * *"}}, api.CodeInvalidScheduleSpec, "spec.cron[0]", "found 7"},
		{"@every", api.ScheduleSpec{Cron: []string{"@every 5m"}}, api.CodeInvalidScheduleSpec, "spec.cron[0]", "use spec.every"},
		{"CRON_TZ", api.ScheduleSpec{Cron: []string{"CRON_TZ=Europe/Berlin 0 9 * * *"}}, api.CodeInvalidScheduleSpec, "spec.cron[0]", "use spec.timezone"},
		{"TZ", api.ScheduleSpec{Cron: []string{"TZ=UTC 0 9 * * *"}}, api.CodeInvalidScheduleSpec, "spec.cron[0]", "use spec.timezone"},
		{"bare TZ", api.ScheduleSpec{Cron: []string{"TZ="}}, api.CodeInvalidScheduleSpec, "spec.cron[0]", "use spec.timezone"},
		{"unknown descriptor", api.ScheduleSpec{Cron: []string{"@fortnightly"}}, api.CodeInvalidScheduleSpec, "spec.cron[0]", `unknown descriptor "@fortnightly"`},
		{"never fires", api.ScheduleSpec{Cron: []string{"0 0 30 2 *"}}, api.CodeInvalidScheduleSpec, "spec.cron[0]", `"0 0 30 2 *" never fires`},
		{"never fires, 31 April", api.ScheduleSpec{Cron: []string{"@daily", "0 0 31 4 *"}}, api.CodeInvalidScheduleSpec, "spec.cron[1]", "never fires"},
		{"every not a duration", api.ScheduleSpec{Every: "often"}, api.CodeInvalidScheduleSpec, "spec.every", `"often" is not a duration`},
		{"every below 1s", api.ScheduleSpec{Every: "500ms"}, api.CodeInvalidScheduleSpec, "spec.every", "500ms is too short: every must be at least 1s"},
		{"every negative", api.ScheduleSpec{Every: "-1m"}, api.CodeInvalidScheduleSpec, "spec.every", "at least 1s"},
		{"every zero", api.ScheduleSpec{Every: "0s"}, api.CodeInvalidScheduleSpec, "spec.every", "at least 1s"},
		{"unknown zone", api.ScheduleSpec{Every: "1h", Timezone: "Mars/Olympus_Mons"}, api.CodeInvalidTimezone, "spec.timezone", `"Mars/Olympus_Mons" is not an IANA time zone name`},
		{"Local", api.ScheduleSpec{Every: "1h", Timezone: "Local"}, api.CodeInvalidTimezone, "spec.timezone", "server's own"},
		{"zone path", api.ScheduleSpec{Every: "1h", Timezone: "../etc/passwd"}, api.CodeInvalidTimezone, "spec.timezone", "not an IANA"},
		{"zone before cron", api.ScheduleSpec{Cron: []string{"bad"}, Timezone: "Nowhere/Else"}, api.CodeInvalidTimezone, "spec.timezone", "not an IANA"},
		{"end before start", api.ScheduleSpec{Every: "1h", StartAt: ptr(start), EndAt: ptr(start.Add(-time.Second))}, api.CodeInvalidScheduleSpec, "spec.end_at", "is before start_at"},
		{"start beyond 9999", api.ScheduleSpec{Every: "1h", StartAt: ptr(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))}, api.CodeInvalidScheduleSpec, "spec.start_at", "year 10000"},
		{"end before year 1", api.ScheduleSpec{Every: "1h", EndAt: ptr(time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC))}, api.CodeInvalidScheduleSpec, "spec.end_at", "year 0"},
		{"repeated time", api.ScheduleSpec{Every: "1h", RepeatedTime: "last"}, api.CodeInvalidScheduleSpec, "spec.repeated_time", `"last" is neither "first" nor "both"`},
		{"jitter not a duration", api.ScheduleSpec{Every: "1h", Jitter: "a bit"}, api.CodeInvalidScheduleSpec, "spec.jitter", "not a duration"},
		{"jitter negative", api.ScheduleSpec{Every: "1h", Jitter: "-1s"}, api.CodeInvalidScheduleSpec, "spec.jitter", "negative"},
		{"jitter over every", api.ScheduleSpec{Every: "1h", Jitter: "61m"}, api.CodeInvalidScheduleSpec, "spec.jitter", "61m is longer than the interval between fires (1h)"},
		{"jitter over cron", api.ScheduleSpec{Cron: []string{"0 1,3 * * *"}, Timezone: "Europe/Berlin", Jitter: "90m"}, api.CodeInvalidScheduleSpec, "spec.jitter", "(1h)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec, err := schedspec.Parse(tt.spec)
			require.Nil(t, spec)
			var fe *schedspec.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.code, fe.Code)
			require.Equal(t, tt.field, fe.Field)
			require.Contains(t, fe.Message, tt.message)
			require.True(t, strings.HasPrefix(fe.Message, tt.field+": "), fe.Message)
			require.Equal(t, fe.Message, err.Error())
		})
	}
}

func TestFieldErrorMessage(t *testing.T) {
	t.Parallel()
	_, err := schedspec.Parse(api.ScheduleSpec{Cron: []string{"* * * * *"}, Jitter: "2m"})
	require.EqualError(t, err, "spec.jitter: 2m is longer than the interval between fires (1m)")
	_, err = schedspec.Parse(api.ScheduleSpec{Cron: []string{"0 25 * * *"}})
	require.EqualError(t, err, `spec.cron[0]: hour field "25": end of range (25) above maximum (23): 25`)
	// A FieldError made without the field in its message still names it.
	require.EqualError(t, &schedspec.FieldError{Field: "overlap", Message: "no such policy"}, "overlap: no such policy")
}

func TestParseAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		spec     api.ScheduleSpec
		interval time.Duration
		zone     string
	}{
		{"five fields", api.ScheduleSpec{Cron: []string{"*/5 * * * *"}}, 5 * time.Minute, "UTC"},
		{"six fields", api.ScheduleSpec{Cron: []string{"*/15 * * * * *"}}, 15 * time.Second, "UTC"},
		{"spaces around", api.ScheduleSpec{Cron: []string{"  0 9 * * *  "}}, 24 * time.Hour, "UTC"},
		{"weekdays", api.ScheduleSpec{Cron: []string{"0 9 * * mon-fri"}}, 24 * time.Hour, "UTC"},
		{"question mark", api.ScheduleSpec{Cron: []string{"0 9 ? * *"}}, 24 * time.Hour, "UTC"},
		{"@yearly", api.ScheduleSpec{Cron: []string{"@yearly"}}, 365 * 24 * time.Hour, "UTC"},
		{"@annually", api.ScheduleSpec{Cron: []string{"@annually"}}, 365 * 24 * time.Hour, "UTC"},
		{"@monthly", api.ScheduleSpec{Cron: []string{"@monthly"}}, 28 * 24 * time.Hour, "UTC"},
		{"@weekly", api.ScheduleSpec{Cron: []string{"@weekly"}}, 7 * 24 * time.Hour, "UTC"},
		{"@daily", api.ScheduleSpec{Cron: []string{"@daily"}}, 24 * time.Hour, "UTC"},
		{"@midnight", api.ScheduleSpec{Cron: []string{"@midnight"}}, 24 * time.Hour, "UTC"},
		{"@hourly", api.ScheduleSpec{Cron: []string{"@hourly"}}, time.Hour, "UTC"},
		{"leap day", api.ScheduleSpec{Cron: []string{"0 0 29 2 *"}}, (4*365 + 1) * 24 * time.Hour, "UTC"},
		{"every", api.ScheduleSpec{Every: "90s", Timezone: "Asia/Tokyo"}, 90 * time.Second, "Asia/Tokyo"},
		{"every 1s", api.ScheduleSpec{Every: "1s"}, time.Second, "UTC"},
		{"union", api.ScheduleSpec{Cron: []string{"0 * * * *"}, Every: "45m"}, 15 * time.Minute, "UTC"},
		{"UTC by name", api.ScheduleSpec{Every: "1h", Timezone: "UTC"}, time.Hour, "UTC"},
		// Daylight saving brings fires closer: 01:00 CET and 03:00 CEST
		// are an hour apart on the night clocks go forward.
		{"two a night, Berlin", api.ScheduleSpec{Cron: []string{"0 1,3 * * *"}, Timezone: "Europe/Berlin"}, time.Hour, "Europe/Berlin"},
		{"two a night, UTC", api.ScheduleSpec{Cron: []string{"0 1,3 * * *"}}, 2 * time.Hour, "UTC"},
		// With "both", a daily fire in the repeated hour fires twice.
		{"daily both", api.ScheduleSpec{Cron: []string{"30 1 * * *"}, Timezone: "America/New_York", RepeatedTime: "both"}, time.Hour, "America/New_York"},
		{"daily first", api.ScheduleSpec{Cron: []string{"30 1 * * *"}, Timezone: "America/New_York", RepeatedTime: "first"}, 23 * time.Hour, "America/New_York"},
		{"jitter equal to interval", api.ScheduleSpec{Cron: []string{"* * * * *"}, Jitter: "1m"}, time.Minute, "UTC"},
		{"start equals end", api.ScheduleSpec{Every: "1h", StartAt: ptr(time.Unix(0, 0)), EndAt: ptr(time.Unix(0, 0))}, time.Hour, "UTC"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec := mustParse(t, tt.spec)
			require.Equal(t, tt.interval, spec.Interval())
			require.Equal(t, tt.zone, spec.Location().String())
		})
	}
}

// TestDailyAcrossDaylightSaving checks a daily 02:30 job on each day
// clocks change, and the days either side: one fire a day, at the
// stated instant.
func TestDailyAcrossDaylightSaving(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		zone     string
		repeated string
		from     string
		want     []string
	}{
		{"Berlin forward", "Europe/Berlin", "", "2026-03-27T12:00:00Z", []string{
			"2026-03-28T01:30:00Z", // 02:30 CET
			"2026-03-29T01:00:00Z", // 02:30 does not exist: 03:00 CEST, when the clocks jump
			"2026-03-30T00:30:00Z", // 02:30 CEST
		}},
		{"Berlin back", "Europe/Berlin", "first", "2026-10-23T12:00:00Z", []string{
			"2026-10-24T00:30:00Z", // 02:30 CEST
			"2026-10-25T00:30:00Z", // 02:30 CEST, its first occurrence
			"2026-10-26T01:30:00Z", // 02:30 CET
		}},
		{"Berlin back both", "Europe/Berlin", "both", "2026-10-23T12:00:00Z", []string{
			"2026-10-24T00:30:00Z",
			"2026-10-25T00:30:00Z", // 02:30 CEST
			"2026-10-25T01:30:00Z", // 02:30 CET
			"2026-10-26T01:30:00Z",
		}},
		{"New York forward", "America/New_York", "", "2026-03-06T12:00:00Z", []string{
			"2026-03-07T07:30:00Z", // 02:30 EST
			"2026-03-08T07:00:00Z", // 02:30 does not exist: 03:00 EDT
			"2026-03-09T06:30:00Z", // 02:30 EDT
		}},
		{"New York back", "America/New_York", "", "2026-10-30T12:00:00Z", []string{
			"2026-10-31T06:30:00Z", // 02:30 EDT
			"2026-11-01T07:30:00Z", // 02:30 EST: only 01:00-02:00 repeats
			"2026-11-02T07:30:00Z",
		}},
		{"New York back both", "America/New_York", "both", "2026-10-30T12:00:00Z", []string{
			"2026-10-31T06:30:00Z",
			"2026-11-01T07:30:00Z",
			"2026-11-02T07:30:00Z",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec := mustParse(t, api.ScheduleSpec{Cron: []string{"30 2 * * *"}, Timezone: tt.zone, RepeatedTime: tt.repeated})
			from := utc(t, tt.from)
			got := fires(t, spec, from, from.Add(3*24*time.Hour))
			var want []time.Time
			for _, w := range tt.want {
				want = append(want, utc(t, w))
			}
			require.Equal(t, want, got)
		})
	}
}

func TestRepeatedTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		zone     string
		cron     string
		repeated string
		from, to string
		want     []string
	}{
		{"New York 01:30 first", "America/New_York", "30 1 * * *", "first", "2026-11-01T00:00:00Z", "2026-11-01T23:00:00Z",
			[]string{"2026-11-01T05:30:00Z"}},
		{"New York 01:30 default", "America/New_York", "30 1 * * *", "", "2026-11-01T00:00:00Z", "2026-11-01T23:00:00Z",
			[]string{"2026-11-01T05:30:00Z"}},
		{"New York 01:30 both", "America/New_York", "30 1 * * *", "both", "2026-11-01T00:00:00Z", "2026-11-01T23:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z"}},
		{"Berlin half-hourly both", "Europe/Berlin", "*/30 * * * *", "both", "2026-10-24T23:15:00Z", "2026-10-25T02:10:00Z",
			[]string{
				"2026-10-24T23:30:00Z", // 01:30 CEST
				"2026-10-25T00:00:00Z", // 02:00 CEST
				"2026-10-25T00:30:00Z", // 02:30 CEST
				"2026-10-25T01:00:00Z", // 02:00 CET
				"2026-10-25T01:30:00Z", // 02:30 CET
				"2026-10-25T02:00:00Z", // 03:00 CET
			}},
		{"Berlin half-hourly first", "Europe/Berlin", "*/30 * * * *", "first", "2026-10-24T23:15:00Z", "2026-10-25T02:10:00Z",
			[]string{
				"2026-10-24T23:30:00Z",
				"2026-10-25T00:00:00Z",
				"2026-10-25T00:30:00Z",
				"2026-10-25T02:00:00Z",
			}},
		// Several skipped times fire once, when the clocks jump; 03:00
		// CEST is that same instant.
		{"Berlin half-hourly forward", "Europe/Berlin", "*/30 * * * *", "", "2026-03-29T00:15:00Z", "2026-03-29T02:10:00Z",
			[]string{"2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z", "2026-03-29T02:00:00Z"}},
		{"skipped times only", "Europe/Berlin", "0,20,40 2 * * *", "", "2026-03-28T12:00:00Z", "2026-03-30T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z", "2026-03-30T00:20:00Z", "2026-03-30T00:40:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec := mustParse(t, api.ScheduleSpec{Cron: []string{tt.cron}, Timezone: tt.zone, RepeatedTime: tt.repeated})
			got := fires(t, spec, utc(t, tt.from), utc(t, tt.to))
			var want []time.Time
			for _, w := range tt.want {
				want = append(want, utc(t, w))
			}
			require.Equal(t, want, got)
		})
	}
}

// TestEveryMinuteAcrossChanges: an every-minute job fires at every
// instant on the minute across a gap (no duplicate, none missing), and
// across a repeat at each instant whose wall clock is new ("first") or
// at all of them ("both").
func TestEveryMinuteAcrossChanges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, zone, repeated string
		from, to             string
		skipFrom, skipTo     string // instants (from included, to not) that do not fire
	}{
		{"Berlin forward", "Europe/Berlin", "", "2026-03-29T00:00:00Z", "2026-03-29T02:00:00Z", "", ""},
		{"New York forward", "America/New_York", "", "2026-03-08T06:00:00Z", "2026-03-08T08:00:00Z", "", ""},
		{"Berlin back first", "Europe/Berlin", "first", "2026-10-24T23:00:00Z", "2026-10-25T03:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"},
		{"Berlin back both", "Europe/Berlin", "both", "2026-10-24T23:00:00Z", "2026-10-25T03:00:00Z", "", ""},
		{"New York back first", "America/New_York", "first", "2026-11-01T04:00:00Z", "2026-11-01T08:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"},
		{"New York back both", "America/New_York", "both", "2026-11-01T04:00:00Z", "2026-11-01T08:00:00Z", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec := mustParse(t, api.ScheduleSpec{Cron: []string{"* * * * *"}, Timezone: tt.zone, RepeatedTime: tt.repeated})
			from, to := utc(t, tt.from), utc(t, tt.to)
			var want []time.Time
			for at := from.Add(time.Minute); !at.After(to); at = at.Add(time.Minute) {
				if tt.skipFrom != "" && !at.Before(utc(t, tt.skipFrom)) && at.Before(utc(t, tt.skipTo)) {
					continue
				}
				want = append(want, at)
			}
			require.Equal(t, want, fires(t, spec, from, to))
		})
	}
}

// TestHourlyForAYear: a year of hourly fires is strictly increasing, and
// misses only the second occurrence of the repeated hour, unless both.
func TestHourlyForAYear(t *testing.T) {
	t.Parallel()
	for _, zone := range []string{"Europe/Berlin", "America/New_York", "UTC", "Australia/Lord_Howe"} {
		for _, repeated := range []string{"first", "both"} {
			t.Run(zone+"/"+repeated, func(t *testing.T) {
				t.Parallel()
				spec := mustParse(t, api.ScheduleSpec{Cron: []string{"0 * * * *"}, Timezone: zone, RepeatedTime: repeated})
				from := time.Date(2025, 12, 31, 23, 59, 59, 0, time.UTC)
				got := fires(t, spec, from, time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC))
				for i := 1; i < len(got); i++ {
					require.True(t, got[i].After(got[i-1]))
				}
				want := 365 * 24
				switch {
				case zone == "UTC":
				case zone == "Australia/Lord_Howe":
					// Its clocks move by half an hour: going forward,
					// 02:00 (skipped) fires at 02:30, an instant of
					// its own; going back, the repeated half hour
					// (01:30 to 02:00) holds no full hour.
				case repeated == "first":
					want--
				}
				require.Len(t, got, want)
			})
		}
	}
}

func TestEvery(t *testing.T) {
	t.Parallel()
	at := utc(t, "2026-06-01T10:07:30Z")
	tests := []struct {
		name  string
		spec  api.ScheduleSpec
		after time.Time
		want  []string
	}{
		{"from the epoch", api.ScheduleSpec{Every: "15m"}, at,
			[]string{"2026-06-01T10:15:00Z", "2026-06-01T10:30:00Z"}},
		{"zone is irrelevant", api.ScheduleSpec{Every: "15m", Timezone: "Asia/Kathmandu"}, at,
			[]string{"2026-06-01T10:15:00Z", "2026-06-01T10:30:00Z"}},
		{"from start_at", api.ScheduleSpec{Every: "15m", StartAt: ptr(utc(t, "2026-06-01T10:03:00Z"))}, at,
			[]string{"2026-06-01T10:18:00Z", "2026-06-01T10:33:00Z"}},
		{"before start_at", api.ScheduleSpec{Every: "15m", StartAt: ptr(utc(t, "2026-06-02T00:00:01.5Z"))}, at,
			[]string{"2026-06-02T00:00:01.5Z", "2026-06-02T00:15:01.5Z"}},
		{"on a fire", api.ScheduleSpec{Every: "1h"}, utc(t, "2026-06-01T10:00:00Z"),
			[]string{"2026-06-01T11:00:00Z"}},
		{"before the epoch", api.ScheduleSpec{Every: "24h"}, utc(t, "1969-07-20T20:17:00Z"),
			[]string{"1969-07-21T00:00:00Z"}},
		// Centuries from start_at, the nanoseconds between do not fit an
		// int64.
		{"far from start_at", api.ScheduleSpec{Every: "24h", StartAt: ptr(utc(t, "1601-01-01T00:00:00Z"))}, at,
			[]string{"2026-06-02T00:00:00Z", "2026-06-03T00:00:00Z"}},
		{"far, odd interval", api.ScheduleSpec{Every: "7s", StartAt: ptr(utc(t, "1601-01-01T00:00:00Z"))}, utc(t, "2026-06-01T00:00:00Z"),
			// 155,379 days lie between, a whole number of weeks.
			[]string{"2026-06-01T00:00:07Z", "2026-06-01T00:00:14Z"}},
		{"long", api.ScheduleSpec{Every: "87600h", StartAt: ptr(utc(t, "2026-01-01T00:00:00Z"))}, at,
			[]string{"2035-12-30T00:00:00Z", "2045-12-27T00:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec := mustParse(t, tt.spec)
			after := tt.after
			for _, w := range tt.want {
				next, ok := spec.Next(after)
				require.True(t, ok)
				require.Equal(t, utc(t, w), next)
				after = next
			}
		})
	}
}

func TestUnion(t *testing.T) {
	t.Parallel()
	spec := mustParse(t, api.ScheduleSpec{Cron: []string{"0 * * * *", "30 * * * *"}, Every: "20m"})
	from := utc(t, "2026-06-01T00:00:00Z")
	var want []time.Time
	for _, m := range []int{20, 30, 40, 60, 80, 90, 100, 120} {
		want = append(want, from.Add(time.Duration(m)*time.Minute))
	}
	require.Equal(t, want, fires(t, spec, from, from.Add(2*time.Hour)))
	require.Equal(t, 10*time.Minute, spec.Interval())
}

func TestBounds(t *testing.T) {
	t.Parallel()
	start, end := utc(t, "2026-06-01T10:00:00Z"), utc(t, "2026-06-01T12:00:00Z")
	spec := mustParse(t, api.ScheduleSpec{Cron: []string{"0 * * * *"}, StartAt: &start, EndAt: &end})
	// start_at and end_at are both included.
	require.Equal(t, []time.Time{start, start.Add(time.Hour), end}, fires(t, spec, utc(t, "2020-01-01T00:00:00Z"), utc(t, "2030-01-01T00:00:00Z")))
	_, ok := spec.Next(end)
	require.False(t, ok)
	_, ok = spec.Next(end.Add(time.Hour))
	require.False(t, ok)
	next, ok := spec.Next(end.Add(-time.Nanosecond))
	require.True(t, ok)
	require.Equal(t, end, next)

	// A start_at between fires: the first fire is the next one.
	spec = mustParse(t, api.ScheduleSpec{Cron: []string{"0 * * * *"}, StartAt: ptr(start.Add(time.Minute))})
	next, ok = spec.Next(time.Time{})
	require.True(t, ok)
	require.Equal(t, start.Add(time.Hour), next)

	// An end_at before any fire: none.
	spec = mustParse(t, api.ScheduleSpec{Cron: []string{"0 0 1 1 *"}, StartAt: &start, EndAt: &end})
	_, ok = spec.Next(start.Add(-time.Hour))
	require.False(t, ok)

	// An every spec ends too.
	spec = mustParse(t, api.ScheduleSpec{Every: "45m", StartAt: &start, EndAt: &end})
	require.Equal(t, []time.Time{start, start.Add(45 * time.Minute), start.Add(90 * time.Minute)}, fires(t, spec, start.Add(-time.Hour), end.Add(time.Hour)))
}

// TestPastTheZoneTable: at the end of 2040, a leap year past the end of
// New York's table, Go's ZoneBounds answers a period that does not hold
// the time asked about; neither Parse nor Next may loop on it.
func TestPastTheZoneTable(t *testing.T) {
	t.Parallel()
	start := utc(t, "2040-12-30T00:00:00Z")
	spec := mustParse(t, api.ScheduleSpec{Cron: []string{"30 1 * * *"}, Timezone: "America/New_York", RepeatedTime: "both", StartAt: &start})
	// Both 01:30s of 3 November 2041 fire, an hour apart.
	require.Equal(t, time.Hour, spec.Interval())
	got := fires(t, spec, start, start.Add(4*24*time.Hour))
	require.Equal(t, []time.Time{
		utc(t, "2040-12-30T06:30:00Z"),
		utc(t, "2040-12-31T06:30:00Z"),
		utc(t, "2041-01-01T06:30:00Z"),
		utc(t, "2041-01-02T06:30:00Z"),
	}, got)
	// The repeat of 4 November 2040 is found from the start of the year;
	// in 2041 the 4th is a Monday, after the change.
	spec = mustParse(t, api.ScheduleSpec{Cron: []string{"30 1 4 11 *"}, Timezone: "America/New_York", RepeatedTime: "both"})
	require.Equal(t, []time.Time{utc(t, "2040-11-04T05:30:00Z"), utc(t, "2040-11-04T06:30:00Z"), utc(t, "2041-11-04T06:30:00Z")},
		fires(t, spec, utc(t, "2040-01-01T00:00:00Z"), utc(t, "2042-01-01T00:00:00Z")))
}

func TestHorizon(t *testing.T) {
	t.Parallel()
	spec := mustParse(t, api.ScheduleSpec{Cron: []string{"0 0 29 2 *"}})
	next, ok := spec.Next(utc(t, "2026-01-01T00:00:00Z"))
	require.True(t, ok)
	require.Equal(t, utc(t, "2028-02-29T00:00:00Z"), next)
	// 2100 is no leap year: the next 29 February after 2096 is in 2104,
	// more than five years on.
	_, ok = spec.Next(utc(t, "2096-03-01T00:00:00Z"))
	require.False(t, ok)
}

func TestCronForms(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, cron, zone string
		from             string
		want             []string
	}{
		{"@weekly", "@weekly", "Europe/Berlin", "2026-06-01T12:00:00Z", // a Monday
			[]string{"2026-06-06T22:00:00Z", "2026-06-13T22:00:00Z"}}, // Sundays 00:00 CEST
		{"@monthly", "@monthly", "UTC", "2026-01-31T00:00:00Z",
			[]string{"2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"}},
		{"@yearly", "@yearly", "America/New_York", "2026-06-01T00:00:00Z",
			[]string{"2027-01-01T05:00:00Z", "2028-01-01T05:00:00Z"}},
		{"seconds", "*/20 * * * * *", "UTC", "2026-06-01T00:00:00Z",
			[]string{"2026-06-01T00:00:20Z", "2026-06-01T00:00:40Z", "2026-06-01T00:01:00Z"}},
		{"seconds, list", "5,10 30 9 * * *", "UTC", "2026-06-01T00:00:00Z",
			[]string{"2026-06-01T09:30:05Z", "2026-06-01T09:30:10Z", "2026-06-02T09:30:05Z"}},
		// Neither day field a star: a day matching either fires.
		{"13th or Friday", "0 0 13 * fri", "UTC", "2026-11-10T00:00:00Z", // a Tuesday
			[]string{"2026-11-13T00:00:00Z", "2026-11-20T00:00:00Z", "2026-11-27T00:00:00Z", "2026-12-04T00:00:00Z", "2026-12-11T00:00:00Z", "2026-12-13T00:00:00Z"}},
		// One a star: the other decides.
		{"Fridays", "0 0 * * 5", "UTC", "2026-11-10T00:00:00Z",
			[]string{"2026-11-13T00:00:00Z", "2026-11-20T00:00:00Z"}},
		{"13ths", "0 0 13 * *", "UTC", "2026-11-10T00:00:00Z",
			[]string{"2026-11-13T00:00:00Z", "2026-12-13T00:00:00Z"}},
		{"31sts skip short months", "0 12 31 * *", "Asia/Tokyo", "2026-01-31T12:00:00Z",
			[]string{"2026-03-31T03:00:00Z", "2026-05-31T03:00:00Z"}},
		{"quarter hours, half-hour zone", "0 9 * * *", "Asia/Kolkata", "2026-06-01T00:00:00Z",
			[]string{"2026-06-01T03:30:00Z", "2026-06-02T03:30:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec := mustParse(t, api.ScheduleSpec{Cron: []string{tt.cron}, Timezone: tt.zone})
			after := utc(t, tt.from)
			for _, w := range tt.want {
				next, ok := spec.Next(after)
				require.True(t, ok)
				require.Equal(t, utc(t, w), next)
				after = next
			}
		})
	}
}

func TestJitter(t *testing.T) {
	t.Parallel()
	s := api.ScheduleSpec{Cron: []string{"*/5 * * * *"}, Jitter: "30s"}
	a, b := mustParse(t, s), mustParse(t, s)
	at := utc(t, "2026-06-01T10:00:00Z")
	seen := map[time.Duration]bool{}
	for i := range 500 {
		id := fmt.Sprintf("sched-%d", i%7)
		nominal := at.Add(time.Duration(i) * 5 * time.Minute)
		j := a.Jitter(id, nominal)
		require.GreaterOrEqual(t, j, time.Duration(0))
		require.Less(t, j, 30*time.Second)
		require.Equal(t, j, b.Jitter(id, nominal), "another Spec, same value")
		require.Equal(t, j, a.Jitter(id, nominal.In(time.FixedZone("X", 3600))), "the zone of t does not matter")
		seen[j] = true
	}
	require.Greater(t, len(seen), 400, "jitter spreads")
	// Pinned, so that a change of the hash, which would move every
	// schedule's due times between releases, is noticed.
	require.Equal(t, time.Duration(8_121_314_920), a.Jitter("nightly-report", at))
	require.NotEqual(t, a.Jitter("nightly-report", at), a.Jitter("nightly-report", at.Add(5*time.Minute)))

	none := mustParse(t, api.ScheduleSpec{Cron: []string{"*/5 * * * *"}})
	require.Zero(t, none.Jitter("nightly-report", at))
}

// sameTimes fails at the first difference between two lists of times,
// showing the neighbourhood rather than the whole lists (testify's diff
// of thousands of lines takes minutes).
func sameTimes(t *testing.T, want, got []time.Time) {
	t.Helper()
	for i := range min(len(want), len(got)) {
		if !want[i].Equal(got[i]) {
			lo, hi := max(i-3, 0), i+3
			require.FailNow(t, "times differ", "at %d: want %v, got %v", i,
				want[lo:min(hi, len(want))], got[lo:min(hi, len(got))])
		}
	}
	require.Equal(t, len(want), len(got), "same start, different lengths")
}

// oracle lists, by brute force, the instants in (from, to] a
// minute-level cron expression fires at in loc: it steps through every
// instant on the minute and every wall-clock minute, and asks robfig
// (in UTC, where its Next is right) whether a wall-clock time matches.
func oracle(t *testing.T, expr string, loc *time.Location, both bool, from, to time.Time) []time.Time {
	t.Helper()
	sched, err := cron.ParseStandard(expr)
	require.NoError(t, err)
	ss := sched.(*cron.SpecSchedule)
	ss.Location = time.UTC
	memo := map[time.Time]bool{}
	matches := func(w time.Time) bool {
		m, ok := memo[w]
		if !ok {
			m = ss.Next(w.Add(-time.Second)).Equal(w)
			memo[w] = m
		}
		return m
	}
	wall := func(i time.Time) time.Time {
		l := i.In(loc)
		return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), 0, time.UTC)
	}
	var out []time.Time
	// The instants stepped through reach far enough either side that
	// every wall-clock time looked at below has its instants among them.
	lo, hi := from.Add(-30*time.Hour), to.Add(30*time.Hour)
	walls := map[time.Time]bool{}
	var instants []time.Time
	for i := lo; !i.After(hi); i = i.Add(time.Minute) {
		instants = append(instants, i)
		w := wall(i)
		second := walls[w]
		walls[w] = true
		if matches(w) && (!second || both) {
			out = append(out, i)
		}
	}
	for w := wall(from).Add(-26 * time.Hour); w.Before(wall(to).Add(26 * time.Hour)); w = w.Add(time.Minute) {
		if walls[w] || !matches(w) {
			continue
		}
		// A skipped time fires when the clocks jump over it: at the
		// first instant whose wall clock is later.
		k := slices.IndexFunc(instants, func(i time.Time) bool { return wall(i).After(w) })
		require.GreaterOrEqual(t, k, 1)
		out = append(out, instants[k])
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	out = slices.CompactFunc(out, time.Time.Equal)
	return slices.DeleteFunc(out, func(i time.Time) bool { return !i.After(from) || i.After(to) })
}

// TestAgainstOracle compares Next with the brute force, around each
// change of offset in 2026 of zones that change by an hour, half an hour
// (Lord Howe), the other way round (Dublin's winter time is its negative
// daylight saving) and by a whole day (Samoa, 2011).
func TestAgainstOracle(t *testing.T) {
	t.Parallel()
	crons := []string{"* * * * *", "*/30 * * * *", "30 2 * * *", "0 1,3 * * *", "15,45 0-4 * * *", "59 1 * * *", "0 0 * * *", "10 2 * * 0"}
	type window struct {
		zone string
		at   time.Time
	}
	var windows []window
	for _, zone := range []string{"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Europe/Dublin", "America/Santiago"} {
		loc, err := time.LoadLocation(zone)
		require.NoError(t, err)
		for at := time.Date(2026, 1, 1, 0, 0, 0, 0, loc); ; {
			_, end := at.ZoneBounds()
			if end.IsZero() || end.Year() > 2026 {
				break
			}
			windows = append(windows, window{zone, end})
			at = end
		}
	}
	windows = append(windows,
		window{"Pacific/Apia", time.Date(2011, 12, 30, 10, 0, 0, 0, time.UTC)},
		// Past the end of the zone tables, changes follow rules, and at
		// the end of a leap year Go's ZoneBounds gives a period that
		// ends before the time asked about.
		window{"America/New_York", time.Date(2040, 3, 11, 7, 0, 0, 0, time.UTC)},
		window{"America/New_York", time.Date(2040, 11, 4, 6, 0, 0, 0, time.UTC)},
		window{"America/New_York", time.Date(2040, 12, 31, 12, 0, 0, 0, time.UTC)},
		window{"Europe/Berlin", time.Date(2040, 10, 28, 1, 0, 0, 0, time.UTC)},
	)
	require.Greater(t, len(windows), 10)
	for _, w := range windows {
		for _, expr := range crons {
			for _, repeated := range []string{"first", "both"} {
				t.Run(fmt.Sprintf("%s/%s/%s/%s", w.zone, w.at.Format("2006-01-02"), expr, repeated), func(t *testing.T) {
					t.Parallel()
					spec := mustParse(t, api.ScheduleSpec{Cron: []string{expr}, Timezone: w.zone, RepeatedTime: repeated})
					from, to := w.at.Add(-26*time.Hour), w.at.Add(26*time.Hour)
					want := oracle(t, expr, spec.Location(), repeated == "both", from, to)
					sameTimes(t, want, fires(t, spec, from, to))
				})
			}
		}
	}
}

// randomCron builds a cron expression from random fields.
func randomCron(r *rand.Rand) string {
	field := func(lo, hi int) string {
		switch r.IntN(5) {
		case 0:
			return "*"
		case 1:
			return fmt.Sprint(lo + r.IntN(hi-lo+1))
		case 2:
			a := lo + r.IntN(hi-lo+1)
			return fmt.Sprintf("%d-%d", a, a+r.IntN(hi-a+1))
		case 3:
			return fmt.Sprintf("*/%d", 1+r.IntN(hi-lo+1))
		default:
			a, b := lo+r.IntN(hi-lo+1), lo+r.IntN(hi-lo+1)
			return fmt.Sprintf("%d,%d", a, b)
		}
	}
	f := []string{field(0, 59), field(0, 23), field(1, 31), field(1, 12), field(0, 6)}
	if r.IntN(3) == 0 {
		f = append([]string{field(0, 59)}, f...)
	}
	return strings.Join(f, " ")
}

// TestAgainstRobfigInUTC: without daylight saving, robfig's own Next is
// right, and this package must agree with it.
func TestAgainstRobfigInUTC(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	parser := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	checked := 0
	for range 1000 {
		expr := randomCron(r)
		spec, err := schedspec.Parse(api.ScheduleSpec{Cron: []string{expr}})
		if err != nil {
			continue // Such as 31 February.
		}
		sched, err := parser.Parse(expr)
		require.NoError(t, err)
		after := time.Unix(r.Int64N(4e9), r.Int64N(1e9)).UTC()
		want := sched.Next(after)
		got, ok := spec.Next(after)
		if want.IsZero() {
			require.False(t, ok, expr)
			continue
		}
		require.True(t, ok, "%s after %s", expr, after)
		require.Equal(t, want.UTC(), got, "%s after %s", expr, after)
		checked++
	}
	require.Greater(t, checked, 600)
}

var fuzzZones = []string{"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Apia", "Asia/Kathmandu"}

var fuzzCrons = []string{"* * * * *", "*/30 * * * *", "30 2 * * *", "0 1,3 * * *", "@weekly", "*/7 * * * * *", "0 0 29 2 *", "15 1-3 * * 0"}

// FuzzNext checks, for any spec of a few kinds and any time, that Next
// comes after the time, that no fire is skipped (from any time between,
// Next gives the same fire), and that the next fire comes after it.
func FuzzNext(f *testing.F) {
	f.Add(uint8(1), uint8(1), true, int64(1792893600), uint32(0), "")     // Berlin, 2026-10-25
	f.Add(uint8(2), uint8(2), false, int64(1772953200), uint32(5), "")    // New York, 2026-03-08
	f.Add(uint8(0), uint8(3), true, int64(1775318400), uint32(999), "")   // Lord Howe, April 2026
	f.Add(uint8(3), uint8(4), false, int64(1325152800), uint32(1), "")    // Samoa, 2011
	f.Add(uint8(5), uint8(5), false, int64(0), uint32(0), "17m")          // union with every
	f.Add(uint8(6), uint8(0), false, int64(4000000000), uint32(7), "")    // leap days
	f.Add(uint8(7), uint8(2), true, int64(1793505600), uint32(123), "1h") // New York, 2026-11-01
	f.Fuzz(func(t *testing.T, cronIdx, zoneIdx uint8, both bool, unix int64, nanos uint32, every string) {
		s := api.ScheduleSpec{
			Cron:     []string{fuzzCrons[int(cronIdx)%len(fuzzCrons)]},
			Timezone: fuzzZones[int(zoneIdx)%len(fuzzZones)],
			Every:    every,
		}
		if both {
			s.RepeatedTime = api.RepeatedTimeBoth
		}
		spec, err := schedspec.Parse(s)
		if err != nil {
			return // An every that is none.
		}
		// Times from 1900 to 2200.
		unix = unix%(300*365*86400) - 70*365*86400
		after := time.Unix(unix, int64(nanos%1e9)).UTC()
		next, ok := spec.Next(after)
		if !ok {
			return
		}
		require.True(t, next.After(after))
		mid := after.Add(next.Sub(after) / 2)
		again, ok := spec.Next(mid)
		require.True(t, ok)
		require.Equal(t, next, again, "Next(%s) skips %s", mid, next)
		again, ok = spec.Next(next.Add(-time.Nanosecond))
		require.True(t, ok)
		require.Equal(t, next, again)
		later, ok := spec.Next(next)
		if ok {
			require.True(t, later.After(next))
		}
	})
}

// FuzzParse checks that no spec text makes Parse panic, and that what it
// accepts has a next fire or a reason for none.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"* * * * *", "0 25 * * *", "@every 1m", "TZ=", "CRON_TZ=x", "@", "1-2-3 * * * *", "*/0 * * * *", "a/b * * * *", "0 0 31 2 *", "5/ * * * *", ",,, * * * *"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		spec, err := schedspec.Parse(api.ScheduleSpec{Cron: []string{expr}})
		if err != nil {
			var fe *schedspec.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, "spec.cron[0]", fe.Field)
			return
		}
		_, ok := spec.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		require.True(t, ok, expr)
	})
}

func BenchmarkNext(b *testing.B) {
	for _, bc := range []struct{ name, cron, zone, repeated string }{
		{"weekdays Berlin", "*/5 9-17 * * mon-fri", "Europe/Berlin", ""},
		{"daily 02:30 New York both", "30 2 * * *", "America/New_York", "both"},
		{"every second UTC", "* * * * * *", "UTC", ""},
	} {
		b.Run(bc.name, func(b *testing.B) {
			spec := mustParse(b, api.ScheduleSpec{Cron: []string{bc.cron}, Timezone: bc.zone, RepeatedTime: bc.repeated})
			// Walk through ten years' fires, again and again.
			from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			until := from.AddDate(10, 0, 0)
			at := from
			for b.Loop() {
				next, ok := spec.Next(at)
				if !ok {
					b.Fatal("no next fire")
				}
				at = next
				if at.After(until) {
					at = from
				}
			}
		})
	}
}
