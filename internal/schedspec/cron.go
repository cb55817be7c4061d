package schedspec

import (
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// parser accepts five fields, six with seconds first, and the
// descriptors. It is a value with no state, so sharing it is safe.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour |
	cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// starBit is the bit robfig sets in a field's mask when the field was
// written as "*" (or "?"); it decides how day of month and day of week
// combine.
const starBit = 1 << 63

// cronSched is one parsed cron expression: the bit masks robfig built,
// without the star bit, and whether each day field was a star.
type cronSched struct {
	second, minute, hour, dom, month, dow uint64
	// either is set when neither day field was a star: a day then
	// matches when either field does, as in Vixie cron. Otherwise it
	// must match both (one of which allows every day).
	either bool
}

// parseCron parses one expression, or says, for a person, why it is
// none.
func parseCron(expr string) (c cronSched, msg string) {
	expr = strings.TrimSpace(expr)
	switch {
	case expr == "":
		return c, "empty cron expression"
	case strings.HasPrefix(expr, "@every"):
		return c, fmt.Sprintf("%q is not accepted in a cron expression: use spec.every", expr)
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return c, "a time zone prefix is not accepted in a cron expression: use spec.timezone"
	case strings.HasPrefix(expr, "@"):
		switch expr {
		case "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly":
		default:
			return c, fmt.Sprintf("unknown descriptor %q (use @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)", expr)
		}
	}
	sched, err := safeParse(expr)
	if err != nil {
		return c, explain(expr, err)
	}
	ss, ok := sched.(*cron.SpecSchedule)
	if !ok {
		// Only @every gives another type, and it was refused above.
		return c, fmt.Sprintf("%q is not a cron expression", expr)
	}
	c = cronSched{
		second: ss.Second &^ starBit,
		minute: ss.Minute &^ starBit,
		hour:   ss.Hour &^ starBit,
		dom:    ss.Dom &^ starBit,
		month:  ss.Month &^ starBit,
		dow:    ss.Dow &^ starBit,
		either: ss.Dom&starBit == 0 && ss.Dow&starBit == 0,
	}
	// robfig takes a field of commas alone (",") as allowing no value at
	// all, which would never fire.
	masks := [...]uint64{c.second, c.minute, c.hour, c.dom, c.month, c.dow}
	for i, m := range masks {
		if m == 0 {
			fields := strings.Fields(expr)
			names := sixFields
			if len(fields) == 5 {
				names, i = fiveFields, i-1
			}
			if i < 0 || i >= len(fields) {
				return c, "a field allows no value"
			}
			return c, fmt.Sprintf("%s field %q allows no value", names[i], fields[i])
		}
	}
	return c, ""
}

// safeParse parses with robfig, turning a panic into an error: the
// expression comes from a client, and a parser bug must refuse it, not
// take the process down.
func safeParse(expr string) (sched cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			sched, err = nil, fmt.Errorf("cannot parse: %v", r)
		}
	}()
	return parser.Parse(expr)
}

var (
	fiveFields = []string{"minute", "hour", "day-of-month", "month", "day-of-week"}
	sixFields  = append([]string{"second"}, fiveFields...)
)

// explain names the field robfig refused: robfig's own errors do not
// say which field they are about, so each field is parsed again alone,
// with every other field a star.
func explain(expr string, err error) string {
	fields := strings.Fields(expr)
	var names []string
	switch len(fields) {
	case 5:
		names = fiveFields
	case 6:
		names = sixFields
	default:
		return fmt.Sprintf("expected 5 fields (or 6, with seconds first), found %d", len(fields))
	}
	for i, f := range fields {
		probe := make([]string, len(fields))
		for j := range probe {
			probe[j] = "*"
		}
		probe[i] = f
		if _, perr := safeParse(strings.Join(probe, " ")); perr != nil {
			return fmt.Sprintf("%s field %q: %v", names[i], f, perr)
		}
	}
	return err.Error()
}

// nextBit is the smallest bit of mask at or above from, or -1.
func nextBit(mask uint64, from int) int {
	if from > 63 {
		return -1
	}
	m := mask &^ (1<<uint(from) - 1)
	if m == 0 {
		return -1
	}
	return bits.TrailingZeros64(m)
}

// dayMatches says whether the civil date matches the day fields.
func (c *cronSched) dayMatches(day int, wd time.Weekday) bool {
	domOK := c.dom&(1<<uint(day)) != 0
	dowOK := c.dow&(1<<uint(wd)) != 0
	if c.either {
		return domOK || dowOK
	}
	return domOK && dowOK
}

// nextCivil is the first wall-clock time from w on, up to limit, that
// the expression matches. Wall-clock times are held as time.Time in UTC,
// a calendar without daylight saving, so that the arithmetic here is
// plain calendar arithmetic whatever the schedule's zone. w must be a
// whole second. It skips a field at a time (month, day, hour, minute,
// second) to the next value its mask allows, so a search costs a few
// dozen steps per year at most, never one per second.
func (c *cronSched) nextCivil(w, limit time.Time) (time.Time, bool) {
	if c.month == 0 || c.dom|c.dow == 0 || c.hour == 0 || c.minute == 0 || c.second == 0 {
		return time.Time{}, false // parseCron refuses such masks.
	}
	for !w.After(limit) {
		y, mo, d := w.Date()
		h, mi, s := w.Clock()
		if c.month&(1<<uint(mo)) == 0 {
			if nm := nextBit(c.month, int(mo)+1); nm >= 1 && nm <= 12 {
				w = time.Date(y, time.Month(nm), 1, 0, 0, 0, 0, time.UTC)
			} else {
				w = time.Date(y+1, time.Month(nextBit(c.month, 1)), 1, 0, 0, 0, 0, time.UTC)
			}
			continue
		}
		if !c.dayMatches(d, w.Weekday()) {
			w = time.Date(y, mo, d+1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if c.hour&(1<<uint(h)) == 0 {
			if nh := nextBit(c.hour, h+1); nh >= 0 && nh <= 23 {
				w = time.Date(y, mo, d, nh, 0, 0, 0, time.UTC)
			} else {
				w = time.Date(y, mo, d+1, 0, 0, 0, 0, time.UTC)
			}
			continue
		}
		if c.minute&(1<<uint(mi)) == 0 {
			if nm := nextBit(c.minute, mi+1); nm >= 0 && nm <= 59 {
				w = time.Date(y, mo, d, h, nm, 0, 0, time.UTC)
			} else {
				w = time.Date(y, mo, d, h+1, 0, 0, 0, time.UTC)
			}
			continue
		}
		if c.second&(1<<uint(s)) == 0 {
			if ns := nextBit(c.second, s+1); ns >= 0 && ns <= 59 {
				w = time.Date(y, mo, d, h, mi, ns, 0, time.UTC)
			} else {
				w = time.Date(y, mo, d, h, mi+1, 0, 0, time.UTC)
			}
			continue
		}
		return w, true
	}
	return time.Time{}, false
}

// offsetAt is the zone's offset from UTC at instant t.
func offsetAt(loc *time.Location, t time.Time) time.Duration {
	_, off := t.In(loc).Zone()
	return time.Duration(off) * time.Second
}

// wallClock is the wall-clock time of instant t in loc, as a time.Time
// in UTC (see nextCivil).
func wallClock(loc *time.Location, t time.Time) time.Time {
	return t.UTC().Add(offsetAt(loc, t))
}

// zoneSpan is further from UTC than any zone's offset has been (the
// widest is Manila's local mean time before 1845, +15:56): every instant
// a wall-clock time occurs at lies within zoneSpan of it, read as UTC.
const zoneSpan = 16 * time.Hour

// firstInstant is the instant wall-clock time w first occurs at in loc;
// or, when w does not occur (clocks went forward over it), the instant
// they did. The instants w may occur at are found by trying the offsets
// in effect around it and keeping those that give w back: that holds for
// any zone whose offset does not change twice within a day and a half.
func firstInstant(loc *time.Location, w time.Time) time.Time {
	lo, hi := w.Add(-zoneSpan), w.Add(zoneSpan)
	offLo, offHi := offsetAt(loc, lo), offsetAt(loc, hi)
	offsets := [3]time.Duration{offLo, offsetAt(loc, w.Add(-offsetAt(loc, w))), offHi}
	var first time.Time
	found := false
	for _, off := range offsets {
		i := w.Add(-off)
		if offsetAt(loc, i) == off && (!found || i.Before(first)) {
			first, found = i, true
		}
	}
	if found {
		return first
	}
	// w is in a gap: it fires when the clocks jump over it.
	if offLo != offHi {
		return transitionIn(loc, lo, hi)
	}
	return w.Add(-offLo) // Not reached for a zone as described above.
}

// transitionIn is the instant in (a, b] that loc's offset changes at,
// for a and b with different offsets and one change between them: the
// end of a's period, as ZoneBounds gives it, when that is the change;
// otherwise found by bisection.
func transitionIn(loc *time.Location, a, b time.Time) time.Time {
	offA := offsetAt(loc, a)
	if _, end := a.In(loc).ZoneBounds(); end.After(a) && !end.After(b) &&
		offsetAt(loc, end) != offA && offsetAt(loc, end.Add(-time.Nanosecond)) == offA {
		return end
	}
	lo, hi := a, b // The offset at lo is offA; at hi, not.
	for hi.Sub(lo) > time.Nanosecond {
		mid := lo.Add(hi.Sub(lo) / 2)
		if offsetAt(loc, mid) == offA {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// nextChange is the first instant after t, and before limit, at which
// loc's offset changes; false when there is none.
func nextChange(loc *time.Location, t, limit time.Time) (time.Time, bool) {
	for t.Before(limit) {
		_, end := t.In(loc).ZoneBounds()
		switch {
		case end.IsZero():
			return time.Time{}, false // The zone stays as it is from t on.
		case !end.After(t):
			// Past the end of a zone's table, where its changes follow a
			// rule, Go (1.26) can give an end that is not after t (at
			// the end of a leap year): step over a day, and find a
			// change within it by bisection.
			next := t.Add(24 * time.Hour)
			if offsetAt(loc, next) != offsetAt(loc, t) {
				return transitionIn(loc, t, next), true
			}
			t = next
		case offsetAt(loc, end) != offsetAt(loc, end.Add(-time.Nanosecond)):
			if !end.Before(limit) {
				return time.Time{}, false
			}
			return end, true
		default:
			// Only the abbreviation changes, or nothing: Go marks a
			// boundary at each new year past the end of a zone's table.
			t = end
		}
	}
	return time.Time{}, false
}
