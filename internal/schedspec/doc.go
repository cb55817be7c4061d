// Package schedspec owns the meaning of a schedule's spec
// (api.ScheduleSpec): it checks one, naming the member at fault as a
// client wrote it, and computes the nominal times it fires at and the
// jitter each fire is put off by. It is pure computation, with no
// database and no clock of its own: every time it uses is given to it.
//
// Cron expressions are parsed with github.com/robfig/cron/v3, but the
// search for the next time is this package's own, over local wall-clock
// times, so that daylight-saving changes behave as documented
// (docs/schedules.md):
//
//   - A local time that does not exist (the hour skipped as clocks go
//     forward) fires once, at the instant the clocks change; several
//     skipped times fire once between them.
//   - A local time that occurs twice (as clocks go back) fires at its
//     first occurrence, or at both when RepeatedTime is "both".
//
// An every spec ignores time zones: it fires at start_at (or the Unix
// epoch) plus whole multiples of its interval.
//
// A *Spec is immutable once Parse returns it, and safe for concurrent use.
package schedspec
