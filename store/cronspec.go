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
func (c cronSpec) first(t time.Time) time.Time {
	return c.sched.Next(t.In(c.loc)).UTC()
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
