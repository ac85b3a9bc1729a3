package store

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule specs are parsed by github.com/robfig/cron/v3: 5-field cron
// (minute first), 6-field cron (seconds first), the @hourly/@daily/@weekly/
// @monthly/@yearly descriptors and @every <duration>.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour |
	cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// cronSpec is a parsed spec in its time zone.
type cronSpec struct {
	sched cron.Schedule
	loc   *time.Location
	every time.Duration // for @every: boundaries keep their phase
}

// specCache holds the specs the fire path parsed: a fire parses its
// schedule's spec every time, and time.LoadLocation reads the zone's file
// each call (a fire of "*/5 9-17 * * 1-5" in Europe/Paris parsed for 49 µs
// of CPU, @hourly in UTC for 1.5 µs; issue 18). A parsed spec is immutable
// and safe to share. Bounded: past maxCachedSpecs distinct (spec, zone)
// pairs the others are parsed each time.
var (
	specCache  sync.Map // specKey → cronSpec
	specCached atomic.Int64
)

const maxCachedSpecs = 1024

type specKey struct{ spec, tz string }

// parseSpecCached is parseSpec through specCache.
func parseSpecCached(spec, tz string) (cronSpec, error) {
	k := specKey{spec, tz}
	if c, ok := specCache.Load(k); ok {
		return c.(cronSpec), nil
	}
	c, err := parseSpec(spec, tz)
	if err == nil && specCached.Load() < maxCachedSpecs {
		if _, loaded := specCache.LoadOrStore(k, c); !loaded {
			specCached.Add(1)
		}
	}
	return c, err
}

// parseSpec checks a spec and a time zone (an IANA name; "" is UTC). Errors
// name the field at fault and match ErrInvalidArgument.
func parseSpec(spec, tz string) (cronSpec, error) {
	var c cronSpec
	switch tz {
	case "":
		tz = "UTC"
	case "Local":
		// Schedulers on different machines would read it differently.
		return c, fmt.Errorf("%w: TZ \"Local\" depends on the machine; name the zone (\"Europe/Paris\")", ErrInvalidArgument)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return c, fmt.Errorf("%w: TZ %q: %v", ErrInvalidArgument, tz, err)
	}
	trimmed := strings.TrimSpace(spec)
	if strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ=") {
		return c, fmt.Errorf("%w: Spec %q: give the time zone in TZ, not in the spec", ErrInvalidArgument, spec)
	}
	if rest, ok := strings.CutPrefix(trimmed, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return c, fmt.Errorf("%w: Spec %q: %v", ErrInvalidArgument, spec, err)
		}
		// The parser would silently round these; say so instead.
		if d < time.Second || d%time.Second != 0 {
			return c, fmt.Errorf("%w: Spec %q: @every needs a whole number of seconds, at least 1s", ErrInvalidArgument, spec)
		}
		c.every = d
	}
	sched, err := cronParser.Parse(trimmed)
	if err != nil {
		return c, fmt.Errorf("%w: Spec %q: %v", ErrInvalidArgument, spec, badField(trimmed, err))
	}
	c.sched, c.loc = sched, loc
	if c.first(time.Now()).IsZero() {
		return c, fmt.Errorf("%w: Spec %q never fires", ErrInvalidArgument, spec)
	}
	return c, nil
}

// first is the first boundary strictly after t: a schedule's first fire.
// Zero when the spec has no boundary in the next five years.
//
// The days are ours, the time within a day robfig's: robfig's Next steps
// days from local midnight, and on a day whose midnight does not exist
// (clocks jumping 00:00 → 01:00, Africa/Cairo 2027-04-30, Asia/Beirut
// 2027-03-28) it stepped back to 23:00 the day before and then past the
// day, so a weekly, monthly or yearly spec skipped it to its next week,
// month or year (attack56b F1); and its hour loop, running past the end of
// a day into one with no midnight, never checked that day (a spec for the
// 29th fired at 09:00 on the 30th); its month loop, from a first of the
// month with no midnight, drifted off the firsts and lost @yearly's whole
// year (America/Havana 2012, America/Asuncion 2017 and 2023). So the
// days the spec names are stepped here, and robfig, on a copy of the spec
// that takes every day, finds the time from t on t's day and from the
// first instant of each later day; its answer counts only when it falls on
// that day. Within a day robfig's DST rules stand: a wall time skipped
// does not fire, one repeated fires twice.
func (c cronSpec) first(t time.Time) time.Time {
	t = t.In(c.loc)
	spec, ok := c.sched.(*cron.SpecSchedule)
	if !ok { // @every
		return c.sched.Next(t).UTC()
	}
	// robfig searches only the time of day: every day matches this copy,
	// so its Next looks at most into the next day.
	tod := *spec
	tod.Dom, tod.Month, tod.Dow = ^uint64(0), ^uint64(0), ^uint64(0)
	y, m, d := t.Date()
	day := civilDay{y, m, d, t.Weekday()}
	for limit := y + 5; day.y <= limit; day.next() {
		if !day.in(spec) {
			continue
		}
		from := t
		if day.y != y || day.m != m || day.d != d {
			start, ok := dayStart(day, c.loc)
			if !ok {
				continue // a day the zone skipped whole
			}
			// Next is strictly after, to the second.
			if s := start.Add(-time.Second); s.After(t) {
				from = s
			}
		}
		next := tod.Next(from)
		if ny, nm, nd := next.Date(); !next.IsZero() && ny == day.y && nm == day.m && nd == day.d {
			return next.UTC()
		}
	}
	return time.Time{}
}

// civilDay is a date, stepped without a zone.
type civilDay struct {
	y  int
	m  time.Month
	d  int
	wd time.Weekday
}

func (c *civilDay) next() {
	c.wd = (c.wd + 1) % 7
	c.d++
	if c.d > 28 && c.d > time.Date(c.y, c.m+1, 0, 0, 0, 0, 0, time.UTC).Day() {
		c.d = 1
		if c.m++; c.m > time.December {
			c.m, c.y = time.January, c.y+1
		}
	}
}

// cronStar is robfig's bit for a field given as "*" (its starBit): a day
// matches both day fields when either is "*", either of them otherwise.
const cronStar = 1 << 63

// in reports whether spec's month and day fields name the date (robfig's
// dayMatches and its month test).
func (c civilDay) in(spec *cron.SpecSchedule) bool {
	if 1<<uint(c.m)&spec.Month == 0 {
		return false
	}
	dom := 1<<uint(c.d)&spec.Dom != 0
	dow := 1<<uint(c.wd)&spec.Dow != 0
	if spec.Dom&cronStar != 0 || spec.Dow&cronStar != 0 {
		return dom && dow
	}
	return dom || dow
}

// dayStart is the first instant of day's civil date in loc: its midnight,
// or the end of the gap that swallowed midnight, or the first of two
// midnights when the clocks went back over it. False for a date the zone
// skipped whole (Pacific/Apia 2011-12-30).
func dayStart(day civilDay, loc *time.Location) (time.Time, bool) {
	y, m, d := day.y, day.m, day.d
	want := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	civil := func(u time.Time) time.Time {
		uy, um, ud := u.Date()
		return time.Date(uy, um, ud, 0, 0, 0, 0, time.UTC)
	}
	// time.Date resolves a midnight in a gap to either side of it.
	u := time.Date(y, m, d, 0, 0, 0, 0, loc)
	for range 3 {
		if !civil(u).Before(want) {
			break
		}
		_, end := u.ZoneBounds() // the gap's end: the day's first instant
		if end.IsZero() {
			return time.Time{}, false
		}
		u = end.In(loc)
	}
	if !civil(u).Equal(want) {
		return time.Time{}, false
	}
	// The day may have begun earlier, at a midnight the clocks went back
	// over: that midnight in the offset in force just before u.
	if before := u.Add(-time.Nanosecond); civil(before).Equal(want) {
		_, off := before.Zone()
		if x := want.Add(-time.Duration(off) * time.Second).In(loc); x.Before(u) && civil(x).Equal(want) {
			u = x
		}
	}
	return u, true
}

// after is the boundary that follows a fire of boundary at now (now is at or
// after boundary). Boundaries missed meanwhile are skipped: one fire stands
// for all of them. @every keeps its phase: the result is boundary plus a
// whole number of periods.
func (c cronSpec) after(boundary, now time.Time) time.Time {
	if c.every > 0 && !now.Before(boundary) {
		return boundary.Add((now.Sub(boundary)/c.every + 1) * c.every)
	}
	return c.first(now)
}

// resumeAt is the boundary a schedule paused at its pending boundary
// resumes to at now: the first boundary strictly after now, so boundaries
// that passed while it was paused never fire. @every keeps the phase of
// pending (boundaries are pending plus a whole number of periods), as a
// fire does; a pending boundary still ahead of now stays.
func (c cronSpec) resumeAt(pending, now time.Time) time.Time {
	if c.every > 0 {
		if pending.After(now) {
			return pending
		}
		return c.after(pending, now)
	}
	return c.first(now)
}

// badField names the cron field that made err, when one can be singled out:
// each field is parsed on its own, the others left at "*".
func badField(spec string, err error) error {
	fields := strings.Fields(spec)
	names := []string{"minute", "hour", "day of month", "month", "day of week"}
	switch len(fields) {
	case 5:
	case 6:
		names = append([]string{"seconds"}, names...)
	default:
		return err
	}
	for i, f := range fields {
		probe := make([]string, len(fields))
		for j := range probe {
			probe[j] = "*"
		}
		probe[i] = f
		if _, perr := cronParser.Parse(strings.Join(probe, " ")); perr != nil {
			return fmt.Errorf("%s field %q: %v", names[i], f, perr)
		}
	}
	return err
}
