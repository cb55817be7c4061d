package schedspec

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/big"
	"strings"
	"time"

	// The zone database is embedded so that a schedule's timezone works
	// on a host (or a container image) without /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/harvest-engine/harvest/api"
)

// horizon bounds the search for a next time: a spec whose next time is
// further than this after the time asked about has none.
const horizonYears = 5

// intervalRef is where the interval between fires is measured from,
// unless start_at is later: a fixed time, so that whether a spec is
// valid does not depend on when it is checked.
var intervalRef = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// Bounds on the measurement of Interval: it looks at the first
// intervalFires fires, going on until intervalSpan has passed when they
// come sooner, and around each change of the zone's offset in that span.
const (
	intervalFires = 1000
	intervalSpan  = 2 * 366 * 24 * time.Hour
)

// FieldError is why a spec is refused. Code is api.CodeInvalidScheduleSpec
// or api.CodeInvalidTimezone; Field names the member as a client wrote
// it: "spec.cron[1]", "spec.every", "spec.timezone", "spec.jitter",
// "spec.start_at", "spec.end_at", "spec.repeated_time", or "spec" when
// neither cron nor every is given. Message, for a person, begins with
// Field, so that it stands alone in an answer or a log line:
// `spec.cron[0]: hour field "25": …`.
type FieldError struct {
	Code    string
	Field   string
	Message string
}

// Error is the message, which names the member at fault.
func (e *FieldError) Error() string {
	if strings.HasPrefix(e.Message, e.Field+": ") {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

func specError(field, format string, args ...any) *FieldError {
	return &FieldError{Code: api.CodeInvalidScheduleSpec, Field: field, Message: field + ": " + fmt.Sprintf(format, args...)}
}

// Spec is a parsed, valid api.ScheduleSpec. It is immutable, and safe
// for concurrent use.
type Spec struct {
	crons    []cronSched
	every    time.Duration
	anchor   time.Time // where every counts from
	loc      *time.Location
	hasStart bool
	start    time.Time
	hasEnd   bool
	end      time.Time
	jitter   time.Duration
	both     bool
	interval time.Duration
}

// Parse validates s and returns its Spec. Its error is always a
// *FieldError.
func Parse(s api.ScheduleSpec) (*Spec, error) {
	spec := &Spec{loc: time.UTC, anchor: time.Unix(0, 0).UTC()}

	// The zone comes first: whether a cron expression ever fires is
	// checked in it.
	switch s.Timezone {
	case "", "UTC":
	case "Local":
		return nil, &FieldError{Code: api.CodeInvalidTimezone, Field: "spec.timezone",
			Message: `spec.timezone: "Local" is the server's own time zone: give an IANA time zone name, such as "Europe/Berlin"`}
	default:
		loc, err := time.LoadLocation(s.Timezone)
		if err != nil {
			return nil, &FieldError{Code: api.CodeInvalidTimezone, Field: "spec.timezone",
				Message: fmt.Sprintf("spec.timezone: %q is not an IANA time zone name, such as \"Europe/Berlin\"", s.Timezone)}
		}
		spec.loc = loc
	}

	for i, expr := range s.Cron {
		field := fmt.Sprintf("spec.cron[%d]", i)
		c, msg := parseCron(expr)
		if msg != "" {
			return nil, specError(field, "%s", msg)
		}
		// A cron expression has no year, so one that fires at all fires
		// within a few years of any time (every 4 years for 29 February).
		from := intervalRef
		if _, ok := c.nextCivil(from, from.AddDate(horizonYears, 0, 0)); !ok {
			return nil, specError(field, "%q never fires", strings.TrimSpace(expr))
		}
		spec.crons = append(spec.crons, c)
	}

	if s.Every != "" {
		d, err := time.ParseDuration(s.Every)
		if err != nil {
			return nil, specError("spec.every", "%q is not a duration, such as \"15m\"", s.Every)
		}
		if d < time.Second {
			return nil, specError("spec.every", "%s is too short: every must be at least 1s", s.Every)
		}
		spec.every = d
	}
	if len(spec.crons) == 0 && spec.every == 0 {
		return nil, specError("spec", "give spec.cron or spec.every (or both)")
	}

	if s.StartAt != nil {
		if err := checkYear("spec.start_at", *s.StartAt); err != nil {
			return nil, err
		}
		spec.hasStart, spec.start = true, s.StartAt.UTC()
		spec.anchor = spec.start
	}
	if s.EndAt != nil {
		if err := checkYear("spec.end_at", *s.EndAt); err != nil {
			return nil, err
		}
		spec.hasEnd, spec.end = true, s.EndAt.UTC()
		if spec.hasStart && spec.end.Before(spec.start) {
			return nil, specError("spec.end_at", "end_at %s is before start_at %s",
				spec.end.Format(time.RFC3339Nano), spec.start.Format(time.RFC3339Nano))
		}
	}

	switch s.RepeatedTime {
	case "", api.RepeatedTimeFirst:
	case api.RepeatedTimeBoth:
		spec.both = true
	default:
		return nil, specError("spec.repeated_time", "%q is neither %q nor %q",
			s.RepeatedTime, api.RepeatedTimeFirst, api.RepeatedTimeBoth)
	}

	spec.interval = spec.measureInterval()

	if s.Jitter != "" {
		d, err := time.ParseDuration(s.Jitter)
		if err != nil {
			return nil, specError("spec.jitter", "%q is not a duration, such as \"30s\"", s.Jitter)
		}
		if d < 0 {
			return nil, specError("spec.jitter", "%s is negative", s.Jitter)
		}
		if d > spec.interval {
			return nil, specError("spec.jitter", "%s is longer than the interval between fires (%s)",
				s.Jitter, shortDuration(spec.interval))
		}
		spec.jitter = d
	}
	return spec, nil
}

// checkYear refuses a time that JSON (RFC 3339) cannot carry, which
// only a configuration file could give.
func checkYear(field string, t time.Time) *FieldError {
	if y := t.UTC().Year(); y < 1 || y > 9999 {
		return specError(field, "year %d is not between 1 and 9999", y)
	}
	return nil
}

// shortDuration writes d as a person would: "1m", not "1m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// Location is the spec's time zone.
func (s *Spec) Location() *time.Location { return s.loc }

// Interval is the shortest gap between consecutive fires seen when the
// spec was validated: every's value for a spec with no cron expression;
// otherwise measured over the fires from 2026-01-01 (or start_at, when
// later), the first thousand or two years' worth, and around each change
// of the zone's offset in those two years (daylight saving can bring
// fires closer). Zero when fewer than two fires were seen. Jitter is no
// longer than it.
func (s *Spec) Interval() time.Duration { return s.interval }

// Jitter is how long the fire of nominal time t of schedule id is put
// off: a deterministic value in [0, jitter), the same every time and on
// any process. It is the first 8 bytes (big-endian) of the SHA-256 of id,
// a zero byte and t in UTC as RFC 3339 with nanoseconds, modulo the
// jitter in nanoseconds; zero when the spec has no jitter.
func (s *Spec) Jitter(id string, t time.Time) time.Duration {
	if s.jitter <= 0 {
		return 0
	}
	h := sha256.New()
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(t.UTC().Format(time.RFC3339Nano)))
	var sum [sha256.Size]byte
	v := binary.BigEndian.Uint64(h.Sum(sum[:0]))
	return time.Duration(v % uint64(s.jitter))
}

// Next is the first nominal time strictly after `after`, within
// [start_at, end_at], in UTC; false when there is none, or none within
// five years after `after`.
func (s *Spec) Next(after time.Time) (time.Time, bool) {
	return s.next(after, true)
}

// next is Next, ignoring end_at unless bounded is set.
func (s *Spec) next(after time.Time, bounded bool) (time.Time, bool) {
	if s.hasStart && after.Before(s.start) {
		after = s.start.Add(-time.Nanosecond)
	}
	// The cron search stops five years on; an every spec's next time is
	// known at once, however far.
	limit := after.AddDate(horizonYears, 0, 0)
	if bounded && s.hasEnd {
		if !after.Before(s.end) {
			return time.Time{}, false
		}
		if s.end.Before(limit) {
			limit = s.end
		}
	}
	var best time.Time
	found := false
	if s.every > 0 {
		if t := everyNext(s.anchor, s.every, after); !bounded || !s.hasEnd || !t.After(s.end) {
			best, found = t, true
		}
	}
	if len(s.crons) > 0 {
		if found {
			limit = best
		}
		if t, ok := s.cronNext(after, limit); ok && (!found || t.Before(best)) {
			best, found = t, true
		}
	}
	if !found {
		return time.Time{}, false
	}
	return best.UTC(), true
}

// cronNext is the first instant after `after`, and not after limit, that
// one of the cron expressions fires at.
func (s *Spec) cronNext(after, limit time.Time) (time.Time, bool) {
	// The first occurrence of each wall-clock time (or, for a skipped
	// one, the instant the clocks jumped) never comes before that of an
	// earlier wall-clock time, so the search walks wall-clock times
	// forward from after's own, and the first that comes after `after`
	// is the answer. Second occurrences ("both") are searched apart.
	from := s.wallFrom(after)
	wallLimit := limit.UTC().Add(zoneSpan)
	var best time.Time
	found := false
	for i := range s.crons {
		c := &s.crons[i]
		w := from
		for {
			var ok bool
			w, ok = c.nextCivil(w, wallLimit)
			if !ok {
				break
			}
			t := firstInstant(s.loc, w)
			if t.After(limit) || (found && !t.Before(best)) {
				break
			}
			if t.After(after) {
				best, found = t, true
				break
			}
			w = w.Add(time.Second)
		}
	}
	if s.both {
		upper := limit
		if found {
			upper = best
		}
		if t, ok := s.secondNext(after, upper); ok && (!found || t.Before(best)) {
			best, found = t, true
		}
	}
	return best, found
}

// wallFrom is the first wall-clock time whose first occurrence can come
// after `after`: the whole second after after's own wall-clock time, or,
// when after is within the second occurrence of repeated times, the end
// of those (their first occurrences came before).
func (s *Spec) wallFrom(after time.Time) time.Time {
	from := wallClock(s.loc, after).Truncate(time.Second).Add(time.Second)
	back := after.Add(-zoneSpan)
	before, now := offsetAt(s.loc, back), offsetAt(s.loc, after)
	if before > now {
		change := transitionIn(s.loc, back, after)
		if after.Before(change.Add(before - now)) {
			if end := change.UTC().Add(before); from.Before(end) {
				from = end
			}
		}
	}
	return from
}

// secondNext is the first second occurrence of a repeated wall-clock
// time that a cron expression matches, after `after` and not after
// upper. It looks at each change of offset that sets the clocks back,
// from zoneSpan before after (a repeat is shorter), and searches the
// repeated wall-clock times forward.
func (s *Spec) secondNext(after, upper time.Time) (time.Time, bool) {
	for t := after.Add(-zoneSpan); ; {
		change, ok := nextChange(s.loc, t, upper)
		if !ok {
			return time.Time{}, false
		}
		if it, ok := s.repeatNext(change, after, upper); ok {
			// Repeats do not overlap, and come in order.
			return it, true
		}
		t = change
	}
}

// repeatNext is the first second occurrence, after `after` and not after
// upper, that a cron expression matches in the repeat that the change of
// offset at change begins, if it sets the clocks back.
func (s *Spec) repeatNext(change, after, upper time.Time) (time.Time, bool) {
	before, now := offsetAt(s.loc, change.Add(-time.Nanosecond)), offsetAt(s.loc, change)
	if before <= now {
		return time.Time{}, false
	}
	lo := change
	if !after.Before(lo) {
		lo = after.Truncate(time.Second).Add(time.Second)
	}
	hi := change.Add(before - now) // The repeat ends here (excluded).
	if !lo.Before(hi) {
		return time.Time{}, false
	}
	wLo := lo.UTC().Add(now)
	wHi := hi.UTC().Add(now).Add(-time.Second)
	var best time.Time
	found := false
	for i := range s.crons {
		if w, ok := s.crons[i].nextCivil(wLo, wHi); ok {
			it := w.Add(-now)
			if !it.After(upper) && (!found || it.Before(best)) {
				best, found = it, true
			}
		}
	}
	return best, found
}

// everyNext is the first anchor + k·every after `after`, k any integer.
func everyNext(anchor time.Time, every time.Duration, after time.Time) time.Time {
	const half = time.Duration(1<<63-1) / 2
	if d := after.Sub(anchor); d > -half && d < half && every < half {
		k := d / every
		if d%every < 0 {
			k-- // Division truncates; the floor is wanted.
		}
		return anchor.Add((k + 1) * every).UTC()
	}
	// Far from the anchor, the nanoseconds between do not fit in an
	// int64.
	ns := func(t time.Time) *big.Int {
		v := big.NewInt(t.Unix())
		v.Mul(v, big.NewInt(1e9))
		return v.Add(v, big.NewInt(int64(t.Nanosecond())))
	}
	a, e := ns(anchor), big.NewInt(int64(every))
	k := new(big.Int).Sub(ns(after), a)
	k.Div(k, e) // Euclidean division: the floor, as e > 0.
	k.Add(k, big.NewInt(1))
	r := k.Mul(k, e)
	r.Add(r, a)
	sec, nsec := new(big.Int).DivMod(r, big.NewInt(1e9), new(big.Int))
	return time.Unix(sec.Int64(), nsec.Int64()).UTC()
}

// measureInterval measures Interval (see there).
func (s *Spec) measureInterval() time.Duration {
	if len(s.crons) == 0 {
		return s.every
	}
	ref := intervalRef
	if s.hasStart && s.start.After(ref) {
		ref = s.start
	}
	spanEnd := ref.Add(intervalSpan)
	var gap time.Duration
	seen := func(from time.Time, until func(n int, t time.Time) bool) {
		prev, ok := s.next(from, false)
		for n := 1; ok && !until(n, prev); n++ {
			t, more := s.next(prev, false)
			if !more {
				return
			}
			if g := t.Sub(prev); gap == 0 || g < gap {
				gap = g
			}
			prev = t
		}
	}
	seen(ref.Add(-time.Nanosecond), func(n int, t time.Time) bool {
		return n >= intervalFires || (n >= 2 && t.After(spanEnd))
	})
	if gap == 0 || (gap <= time.Second && s.every == 0) {
		// No gap between cron fires is below a second (they fall on
		// whole seconds), nor can a change of offset make one.
		return gap
	}
	// A change of offset can bring two fires closer together, by as
	// much as the change: look at the fires around each.
	base := gap
	for t := ref; ; {
		change, ok := nextChange(s.loc, t, spanEnd)
		if !ok {
			break
		}
		t = change
		shift := offsetAt(s.loc, change) - offsetAt(s.loc, change.Add(-time.Nanosecond))
		if shift < 0 {
			shift = -shift
		}
		reach := base + shift + time.Second
		stop := change.Add(reach)
		seen(change.Add(-reach), func(n int, t time.Time) bool {
			return n >= intervalFires || t.After(stop)
		})
	}
	return gap
}
