package store

import (
	"sort"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// wallMatches is first's definition walked minute by minute: every whole
// minute after start and before end whose wall clock in c's zone the spec
// names (specs here have no seconds field and zones whole-minute offsets).
// The test walks each span once, for all the starting points in it.
func wallMatches(c cronSpec, start, end time.Time) []time.Time {
	spec := c.sched.(*cron.SpecSchedule)
	var out []time.Time
	for u := start.Truncate(time.Minute).Add(time.Minute); u.Before(end); u = u.Add(time.Minute) {
		w := u.In(c.loc)
		day := civilDay{w.Year(), w.Month(), w.Day(), w.Weekday()}
		if 1<<uint(w.Minute())&spec.Minute != 0 && 1<<uint(w.Hour())&spec.Hour != 0 && day.in(spec) {
			out = append(out, u.UTC())
		}
	}
	return out
}

// bruteFirst is the first whole minute after t, within the window, of
// matches (wallMatches over a span that holds t and the window after it):
// the minute a walk from t would stop at. Zero when none comes within the
// window. Whole minutes are the same instants whatever the walk's start
// (Truncate counts from the zero time), so one walk serves every t.
func bruteFirst(matches []time.Time, t time.Time, window time.Duration) time.Time {
	from := t.Truncate(time.Minute).Add(time.Minute)
	i := sort.Search(len(matches), func(i int) bool { return !matches[i].Before(from) })
	if i < len(matches) && matches[i].Before(t.Add(window)) {
		return matches[i]
	}
	return time.Time{}
}

// TestCronFirstIsTheFirstWallClockMatch checks first against bruteFirst
// from every 37 minutes around the clock changes that broke robfig's
// search: half-hour shifts (Lord_Howe, Chatham), clocks going back over
// midnight (St_Johns 2010), midnights skipped (Cairo, Beirut, Havana), a
// day skipped whole (Apia 2011), and New York's ordinary changes.
func TestCronFirstIsTheFirstWallClockMatch(t *testing.T) {
	around := []struct {
		zone string
		day  string // a date of a clock change, in that zone
	}{
		{"Australia/Lord_Howe", "2027-04-04"}, {"Australia/Lord_Howe", "2026-10-04"},
		{"Pacific/Chatham", "2027-04-04"}, {"Pacific/Chatham", "2026-09-27"},
		{"America/St_Johns", "2010-11-07"}, {"America/St_Johns", "2010-03-14"},
		{"Africa/Cairo", "2027-04-30"}, {"Asia/Beirut", "2027-03-28"}, {"America/Havana", "2012-04-01"},
		{"Pacific/Apia", "2011-12-30"}, {"America/New_York", "2026-03-08"}, {"America/New_York", "2026-11-01"},
	}
	specs := []string{
		"*/15 * * * *", "5 4 * * 0", "30 1 * * *", "30 2 * * *", "45 2 * * *", "0 0 * * *", "59 23 * * *",
		"0 9 * * 5", "0 9 30 * *", "0 0 * * 0", "15 3 * * 6,0",
	}
	const window = 8 * 24 * time.Hour
	for _, a := range around {
		loc, err := time.LoadLocation(a.zone)
		if err != nil {
			t.Fatal(err)
		}
		day, err := time.ParseInLocation("2006-01-02", a.day, loc)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range specs {
			c, err := parseSpec(s, a.zone)
			if err != nil {
				t.Fatal(err)
			}
			start, stop := day.Add(-30*time.Hour), day.Add(30*time.Hour)
			matches := wallMatches(c, start, stop.Add(window))
			for from := start; from.Before(stop); from = from.Add(37*time.Minute + 7*time.Second) {
				want := bruteFirst(matches, from, window)
				if want.IsZero() {
					continue // beyond the window: the walk would take too long
				}
				if got := c.first(from); !got.Equal(want) {
					t.Errorf("%q in %s from %s: first is %s, want %s", s, a.zone, from.In(loc), got.In(loc), want.In(loc))
				}
			}
		}
	}
}

// BenchmarkCronFirst is a fire's search for its next boundary.
func BenchmarkCronFirst(b *testing.B) {
	from := time.Date(2026, 12, 4, 17, 58, 3, 0, time.UTC) // a Friday evening
	for _, s := range []struct{ spec, tz string }{
		{"@hourly", ""}, {"*/5 9-17 * * 1-5", "Europe/Paris"}, {"0 9 30 4 *", "Africa/Cairo"}, {"0 0 29 2 *", "UTC"},
	} {
		c, err := parseSpec(s.spec, s.tz)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(s.spec, func(b *testing.B) {
			for b.Loop() {
				c.first(from)
			}
		})
	}
}
