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
// A boundary is an instant whose wall clock in the spec's zone the spec
// names. So a wall time the clocks skip does not fire, one they repeat
// fires each time it comes, and a day the zone skips whole has no
// boundaries. robfig parses the spec; the search is ours, because robfig's
// Next steps days from local midnight and adds hours on the wall clock:
// on a day whose midnight does not exist (Africa/Cairo 2027-04-30) a
// weekly, monthly or yearly spec skipped to its next week, month or year
// (attack56b F1); in zones whose clocks move by half an hour
// (Australia/Lord_Howe, Pacific/Chatham) a spec on the fall-back day
// skipped a week; and where the clocks went back over midnight
// (America/St_Johns 2010) the repeated evening was lost (review56 R1, R2).
//
// The search walks t's future in spans of one UTC offset (ZoneBounds): in
// a span the wall clock is the instant plus the offset, so the first wall
// time the spec names in the span, the span's days taken in order, is the
// answer, or the span has none.
func (c cronSpec) first(t time.Time) time.Time {
	spec, ok := c.sched.(*cron.SpecSchedule)
	if !ok { // @every
		return c.sched.Next(t.In(c.loc)).UTC()
	}
	// Strictly after t, to the second.
	u := t.Truncate(time.Second).Add(time.Second).In(c.loc)
	limit := u.AddDate(5, 0, 0)
	for u.Before(limit) {
		_, off := u.Zone()
		_, end := u.ZoneBounds()
		if end.IsZero() || end.After(limit) {
			end = limit // no further change of offset: the rest is one span
		}
		if b, ok := firstInSpan(spec, u, end, off); ok {
			return b.UTC()
		}
		u = end.In(c.loc)
	}
	return time.Time{}
}

// firstInSpan is the first instant in [from, end) whose wall clock, at
// offset off seconds east of UTC, spec names.
func firstInSpan(spec *cron.SpecSchedule, from, end time.Time, off int) (time.Time, bool) {
	shift := time.Duration(off) * time.Second
	// Wall clocks as UTC times: their fields are the wall clock's.
	wall, wallEnd := from.UTC().Add(shift), end.UTC().Add(shift)
	midnight := wall.Truncate(24 * time.Hour)
	y, m, d := midnight.Date()
	day := civilDay{y, m, d, midnight.Weekday()}
	sec := int(wall.Sub(midnight) / time.Second)
	for ; midnight.Before(wallEnd); midnight, sec = midnight.Add(24*time.Hour), 0 {
		if day.in(spec) {
			if s, ok := nextTimeOfDay(spec, sec); ok {
				if w := midnight.Add(time.Duration(s) * time.Second); w.Before(wallEnd) {
					return w.Add(-shift), true
				}
				return time.Time{}, false // the span ends before that time of day
			}
		}
		day.next()
	}
	return time.Time{}, false
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

// nextTimeOfDay is the first second of the day at or after sec (seconds
// since midnight) whose hour, minute and second spec names.
func nextTimeOfDay(spec *cron.SpecSchedule, sec int) (int, bool) {
	h0, m0, s0 := sec/3600, sec/60%60, sec%60
	for h := h0; h < 24; h++ {
		if 1<<uint(h)&spec.Hour == 0 {
			continue
		}
		for m := 0; m < 60; m++ {
			if h == h0 && m < m0 || 1<<uint(m)&spec.Minute == 0 {
				continue
			}
			for s := 0; s < 60; s++ {
				if h == h0 && m == m0 && s < s0 || 1<<uint(s)&spec.Second == 0 {
					continue
				}
				return h*3600 + m*60 + s, true
			}
		}
	}
	return 0, false
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
