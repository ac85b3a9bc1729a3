package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// clockAt is a fake clock set to t.
func clockAt(t time.Time) *fakeClock { return &fakeClock{t: t} }

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func onlySchedule(t *testing.T, s *store.Store) store.ScheduleInfo {
	t.Helper()
	all, err := s.Schedules(ctx(t))
	require.NoError(t, err)
	require.Len(t, all, 1)
	return all[0]
}

// queuedJobs counts q's pending jobs, due or not: fired and not yet taken.
func queuedJobs(t *testing.T, c context.Context, q *store.Queue) int64 {
	t.Helper()
	st, err := q.Stats(c)
	require.NoError(t, err)
	return st.Ready + st.Scheduled
}

// drain claims every job of q and returns them in claim order.
func drain(t *testing.T, q *store.Queue) []*store.Job {
	t.Helper()
	jobs, err := q.Claim(ctx(t), "drain", 1000, time.Minute)
	require.NoError(t, err)
	return jobs
}

// TestCronNextFireTimes registers each spec at a known moment and checks the
// first boundary, then fires it and checks the one after, through the
// schedule table of each engine. The New York rows cross both DST changes
// of 2026: 02:30 on 8 March does not exist and does not fire; 01:30 on
// 1 November happens twice and fires twice (robfig/cron's behaviour).
func TestCronNextFireTimes(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		return v
	}
	cases := []struct {
		name, spec, tz string
		from           time.Time
		first, then    time.Time
	}{
		{"five fields, weekdays", "30 4 * * 1-5", "", utc("2026-11-28T12:00:00Z"), utc("2026-11-30T04:30:00Z"), utc("2026-12-01T04:30:00Z")},
		{"six fields, seconds", "*/15 * * * * *", "UTC", utc("2026-01-01T00:00:07Z"), utc("2026-01-01T00:00:15Z"), utc("2026-01-01T00:00:30Z")},
		{"six fields, one second", "7 0 * * * *", "UTC", utc("2026-01-01T00:00:07Z"), utc("2026-01-01T01:00:07Z"), utc("2026-01-01T02:00:07Z")},
		{"every 90s", "@every 90s", "", utc("2026-01-01T12:00:00.4Z"), utc("2026-01-01T12:01:30Z"), utc("2026-01-01T12:03:00Z")},
		{"hourly", "@hourly", "", utc("2026-11-25T12:00:00Z"), utc("2026-11-25T13:00:00Z"), utc("2026-11-25T14:00:00Z")},
		{"weekly", "@weekly", "", utc("2026-11-25T12:00:00Z"), utc("2026-11-29T00:00:00Z"), utc("2026-12-06T00:00:00Z")},
		{"monthly", "@monthly", "", utc("2026-11-25T12:00:00Z"), utc("2026-12-01T00:00:00Z"), utc("2027-01-01T00:00:00Z")},
		{"daily across spring forward", "@daily", "America/New_York",
			time.Date(2026, 3, 7, 12, 0, 0, 0, ny), utc("2026-03-08T05:00:00Z"), utc("2026-03-09T04:00:00Z")},
		{"skipped 02:30 on spring forward", "30 2 * * *", "America/New_York",
			time.Date(2026, 3, 7, 12, 0, 0, 0, ny), utc("2026-03-09T06:30:00Z"), utc("2026-03-10T06:30:00Z")},
		{"03:00 right after the gap", "0 3 * * *", "America/New_York",
			time.Date(2026, 3, 8, 1, 0, 0, 0, ny), utc("2026-03-08T07:00:00Z"), utc("2026-03-09T07:00:00Z")},
		{"repeated 01:30 on fall back", "30 1 * * *", "America/New_York",
			time.Date(2026, 10, 31, 12, 0, 0, 0, ny), utc("2026-11-01T05:30:00Z"), utc("2026-11-01T06:30:00Z")},
	}
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				got := cronBoundaries(t, s, clk, tc.name, tc.spec, tc.tz, tc.from, tc.first, tc.then)
				wantTZ := tc.tz
				if wantTZ == "" {
					wantTZ = "UTC"
				}
				assert.Equal(t, wantTZ, got.TZ)
			})
		}
	})
}

// TestCronDaysWithoutMidnight: a spec that names the day (of the week, of
// the month, a month) fires on a day whose midnight the zone skips (the
// clocks jump 00:00 → 01:00: Africa/Cairo on 30 April 2027, Asia/Beirut on
// 28 March 2027), as at every other wall time that day exists; only a wall
// time skipped does not fire that day. robfig/cron steps days from local
// midnight and stepped past such a day: a weekly spec fired a week late, a
// monthly one a month late, a yearly one a year late (attack56b F1); a
// spec for the day before fired on such a day instead of a year later.
// Also the clock changes robfig's hour loop got wrong: half-hour shifts
// and clocks going back over midnight. Through Set, Info and a fire, as
// the scheduler reads the spec.
func TestCronDaysWithoutMidnight(t *testing.T) {
	zone := func(name string) *time.Location {
		loc, err := time.LoadLocation(name)
		require.NoError(t, err)
		return loc
	}
	cairo, beirut, ny := zone("Africa/Cairo"), zone("Asia/Beirut"), zone("America/New_York")
	lordHowe, chatham, stJohns := zone("Australia/Lord_Howe"), zone("Pacific/Chatham"), zone("America/St_Johns")
	at := func(loc *time.Location, y int, m time.Month, d, h, min int) time.Time {
		return time.Date(y, m, d, h, min, 0, 0, loc)
	}
	cases := []struct {
		name, spec  string
		loc         *time.Location
		from        time.Time
		first, then time.Time
	}{
		{"Cairo fridays", "0 9 * * 5", cairo, at(cairo, 2027, 4, 29, 12, 0), at(cairo, 2027, 4, 30, 9, 0), at(cairo, 2027, 5, 7, 9, 0)},
		{"Cairo monthly", "0 9 30 * *", cairo, at(cairo, 2027, 4, 29, 12, 0), at(cairo, 2027, 4, 30, 9, 0), at(cairo, 2027, 5, 30, 9, 0)},
		{"Cairo yearly", "0 9 30 4 *", cairo, at(cairo, 2027, 4, 29, 12, 0), at(cairo, 2027, 4, 30, 9, 0), at(cairo, 2028, 4, 30, 9, 0)},
		{"Beirut sundays", "0 9 * * 0", beirut, at(beirut, 2027, 3, 27, 12, 0), at(beirut, 2027, 3, 28, 9, 0), at(beirut, 2027, 4, 4, 9, 0)},
		{"Beirut monthly", "0 9 28 * *", beirut, at(beirut, 2027, 3, 27, 12, 0), at(beirut, 2027, 3, 28, 9, 0), at(beirut, 2027, 4, 28, 9, 0)},
		{"Beirut yearly", "0 9 28 3 *", beirut, at(beirut, 2027, 3, 27, 12, 0), at(beirut, 2027, 3, 28, 9, 0), at(beirut, 2028, 3, 28, 9, 0)},
		{"Cairo daily", "0 9 * * *", cairo, at(cairo, 2027, 4, 29, 12, 0), at(cairo, 2027, 4, 30, 9, 0), at(cairo, 2027, 5, 1, 9, 0)},
		{"Cairo the day before, yearly", "0 9 29 4 *", cairo, at(cairo, 2027, 4, 29, 12, 0), at(cairo, 2028, 4, 29, 9, 0), at(cairo, 2029, 4, 29, 9, 0)},
		{"Cairo skipped midnight, fridays", "0 0 * * 5", cairo, at(cairo, 2027, 4, 29, 12, 0), at(cairo, 2027, 5, 7, 0, 0), at(cairo, 2027, 5, 14, 0, 0)},
		{"Cairo 01:00, the day's first minute, fridays", "0 1 * * 5", cairo, at(cairo, 2027, 4, 29, 12, 0), at(cairo, 2027, 4, 30, 1, 0), at(cairo, 2027, 5, 7, 1, 0)},
		{"New York sundays on spring forward", "0 9 * * 0", ny, at(ny, 2026, 3, 7, 12, 0), at(ny, 2026, 3, 8, 9, 0), at(ny, 2026, 3, 15, 9, 0)},
		{"New York skipped 02:30, yearly", "30 2 8 3 *", ny, at(ny, 2026, 3, 7, 12, 0), at(ny, 2027, 3, 8, 2, 30), at(ny, 2028, 3, 8, 2, 30)},
		// Half-hour shifts: 02:00 → 01:30 on 4 April 2027; robfig's hour
		// loop lost the day and fired a week late (review56 R2).
		{"Lord Howe sundays on fall back", "5 4 * * 0", lordHowe, at(lordHowe, 2027, 4, 3, 12, 0), at(lordHowe, 2027, 4, 4, 4, 5), at(lordHowe, 2027, 4, 11, 4, 5)},
		{"Chatham 02:45 twice on fall back", "45 2 * * *", chatham, at(chatham, 2027, 4, 3, 12, 0),
			time.Date(2027, 4, 3, 13, 0, 0, 0, time.UTC), time.Date(2027, 4, 3, 14, 0, 0, 0, time.UTC)},
		// The clocks went back over midnight, 00:01 → 23:01 the day
		// before: that evening's quarter hours come again (review56 R1).
		{"St Johns back over midnight", "*/15 * * * *", stJohns, time.Date(2010, 11, 7, 2, 30, 0, 0, time.UTC),
			time.Date(2010, 11, 7, 2, 45, 0, 0, time.UTC), time.Date(2010, 11, 7, 3, 0, 0, 0, time.UTC)},
	}
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clk := newFakeClock()
		s := e.open(t, store.WithClock(clk.Now))
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				cronBoundaries(t, s, clk, tc.name, tc.spec, tc.loc.String(), tc.from, tc.first, tc.then)
			})
		}
	})
}

// cronBoundaries registers spec in tz at from, through the schedule table,
// and checks its first boundary; fires it there and checks the job's RunAt
// and the boundary after. It returns the schedule as it then reads.
func cronBoundaries(t *testing.T, s *store.Store, clk *fakeClock, name, spec, tz string, from, first, then time.Time) store.ScheduleInfo {
	t.Helper()
	c := ctx(t)
	t.Cleanup(func() { _ = s.Schedule("cron").Delete(c) })
	q := s.Queue("cron-" + name)
	clk.Set(from)
	require.NoError(t, s.Schedule("cron").Set(c, store.ScheduleSpec{Spec: spec, TZ: tz, Queue: q.Name()}))
	got := onlySchedule(t, s)
	assert.True(t, first.Equal(got.NextFireAt), "first boundary: want %s, got %s", first.UTC(), got.NextFireAt.UTC())

	clk.Set(got.NextFireAt)
	fired, err := s.Scheduler("table", store.SchedulerOpts{}).RunOnce(c)
	require.NoError(t, err)
	require.Equal(t, 1, fired)
	jobs := drain(t, q)
	require.Len(t, jobs, 1)
	assert.True(t, first.Equal(jobs[0].RunAt), "the job's RunAt is its boundary")
	got = onlySchedule(t, s)
	assert.True(t, then.Equal(got.NextFireAt), "second boundary: want %s, got %s", then.UTC(), got.NextFireAt.UTC())
	require.NotNil(t, got.LastFiredAt)
	return got
}

// TestMissedBoundariesCollapse: after downtime a schedule fires once, for
// the first missed boundary, and moves on to its next boundary after now;
// @every keeps its phase.
func TestMissedBoundariesCollapse(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
		clk := clockAt(start)
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		q := s.Queue("reports")
		require.NoError(t, s.Schedule("every-minute").Set(c, store.ScheduleSpec{Spec: "@every 1m", Queue: q.Name()}))
		require.NoError(t, s.Schedule("five-past").Set(c, store.ScheduleSpec{Spec: "*/5 * * * *", Queue: q.Name(), Priority: 3}))

		clk.Set(start.Add(17*time.Minute + 20*time.Second)) // down for 17 minutes
		fired, err := s.Scheduler("late", store.SchedulerOpts{}).RunOnce(c)
		require.NoError(t, err)
		assert.Equal(t, 2, fired, "one fire per schedule, however many boundaries were missed")

		jobs := drain(t, q)
		require.Len(t, jobs, 2)
		assert.Equal(t, 3, jobs[0].Priority, "the schedule's priority is the job's")
		assert.True(t, start.Add(5*time.Minute).Equal(jobs[0].RunAt), "first missed */5 boundary")
		assert.True(t, start.Add(time.Minute).Equal(jobs[1].RunAt), "first missed @every boundary")

		all, err := s.Schedules(c)
		require.NoError(t, err)
		require.Len(t, all, 2)
		assert.True(t, start.Add(18*time.Minute).Equal(all[0].NextFireAt), "@every keeps its phase")
		assert.True(t, start.Add(20*time.Minute).Equal(all[1].NextFireAt))

		fired, err = s.Scheduler("late", store.SchedulerOpts{}).RunOnce(c)
		require.NoError(t, err)
		assert.Zero(t, fired, "nothing is due twice")
	})
}

// TestScheduleRejectsBadInput: every field is checked before anything is
// stored, with the sentinel the error names.
func TestScheduleRejectsBadInput(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		good := store.ScheduleSpec{Spec: "0 3 * * *", Queue: "reports"}
		with := func(f func(*store.ScheduleSpec)) store.ScheduleSpec {
			sp := good
			f(&sp)
			return sp
		}
		cases := []struct {
			name     string
			spec     store.ScheduleSpec
			sentinel error
			mentions string
		}{
			{"nightly", with(func(sp *store.ScheduleSpec) { sp.Queue = "" }), store.ErrInvalidName, `Queue ""`},
			{"nightly", with(func(sp *store.ScheduleSpec) { sp.Queue = "__alk_outbox:x" }), store.ErrReservedName, `Queue "__alk_outbox:x"`},
			{"", good, store.ErrInvalidName, "schedule"},
			{"__alk_mine", good, store.ErrReservedName, "schedule"},
			{"nightly", with(func(sp *store.ScheduleSpec) { sp.Spec = "61 * * * *" }), store.ErrInvalidArgument, `minute field "61"`},
			{"nightly", with(func(sp *store.ScheduleSpec) { sp.Spec = "0 0 * * MON-XYZ" }), store.ErrInvalidArgument, "day of week field"},
			{"nightly", with(func(sp *store.ScheduleSpec) { sp.Spec = "75 * * * * *" }), store.ErrInvalidArgument, `seconds field "75"`},
			{"nightly", with(func(sp *store.ScheduleSpec) { sp.Spec = "* * *" }), store.ErrInvalidArgument, "expected 5 to 6 fields"},
			{"nightly", with(func(sp *store.ScheduleSpec) { sp.Spec = "@every 500ms" }), store.ErrInvalidArgument, "whole number of seconds"},
			{"nightly", with(func(sp *store.ScheduleSpec) { sp.Spec = "@every soon" }), store.ErrInvalidArgument, "Spec"},
			{"nightly", with(func(sp *store.ScheduleSpec) { sp.Spec = "@reboot" }), store.ErrInvalidArgument, "Spec"},
			{"nightly", with(func(sp *store.ScheduleSpec) { sp.Spec = "0 0 30 2 *" }), store.ErrInvalidArgument, "never fires"},
			{"nightly", with(func(sp *store.ScheduleSpec) { sp.Spec = "CRON_TZ=Europe/Paris 0 3 * * *" }), store.ErrInvalidArgument, "TZ"},
			{"nightly", with(func(sp *store.ScheduleSpec) { sp.TZ = "Mars/Olympus_Mons" }), store.ErrInvalidArgument, `TZ "Mars/Olympus_Mons"`},
			{"nightly", with(func(sp *store.ScheduleSpec) { sp.TZ = "Local" }), store.ErrInvalidArgument, `TZ "Local" depends on the machine`},
			{"nightly", with(func(sp *store.ScheduleSpec) { sp.MaxAttempts = -1 }), store.ErrInvalidArgument, "MaxAttempts"},
		}
		for _, tc := range cases {
			err := s.Schedule(tc.name).Set(c, tc.spec)
			require.ErrorIs(t, err, tc.sentinel, "%q %+v", tc.name, tc.spec)
			assert.Contains(t, err.Error(), tc.mentions)
			assert.Contains(t, err.Error(), "alkstore: set schedule")
		}
		all, err := s.Schedules(c)
		require.NoError(t, err)
		assert.Empty(t, all, "nothing was stored")
		nightly := s.Schedule("nightly")
		assert.ErrorIs(t, nightly.Delete(c), store.ErrNotFound)
		assert.ErrorIs(t, nightly.Pause(c), store.ErrNotFound)
		assert.ErrorIs(t, nightly.Resume(c), store.ErrNotFound)
		_, err = nightly.Info(c)
		assert.ErrorIs(t, err, store.ErrNotFound)
	})
}

// TestPauseResumeDeleteSchedule: a paused schedule does not fire; resuming
// restarts from the next boundary after now (what passed meanwhile never
// fires); re-registering keeps the pending boundary and the pause unless the
// spec changed; unscheduling removes the row.
func TestPauseResumeDeleteSchedule(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
		clk := clockAt(start)
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		q := s.Queue("beats")
		sch := s.Scheduler("solo", store.SchedulerOpts{})
		beat := s.Schedule("beat")
		spec := store.ScheduleSpec{Spec: "*/10 * * * *", Queue: q.Name(), Payload: []byte("thump")}
		require.NoError(t, beat.Set(c, spec))
		require.True(t, start.Add(10*time.Minute).Equal(onlySchedule(t, s).NextFireAt))

		require.NoError(t, beat.Pause(c))
		got := onlySchedule(t, s)
		assert.True(t, got.Paused)
		require.NoError(t, beat.Set(c, spec), "registering again at start-up")
		got, err := beat.Info(c)
		require.NoError(t, err)
		assert.Equal(t, onlySchedule(t, s), got, "Info reads what Schedules lists")
		assert.True(t, got.Paused, "re-registering keeps the pause")
		assert.True(t, start.Add(10*time.Minute).Equal(got.NextFireAt), "and the pending boundary")

		clk.Set(start.Add(35 * time.Minute))
		fired, err := sch.RunOnce(c)
		require.NoError(t, err)
		assert.Zero(t, fired, "paused: no fire")
		assert.Empty(t, drain(t, q))

		require.NoError(t, beat.Resume(c))
		got = onlySchedule(t, s)
		assert.False(t, got.Paused)
		assert.True(t, start.Add(40*time.Minute).Equal(got.NextFireAt), "resumes from the next boundary after now")
		fired, err = sch.RunOnce(c)
		require.NoError(t, err)
		assert.Zero(t, fired, "the boundaries passed while paused never fire")
		require.NoError(t, beat.Resume(c), "resuming a running schedule does nothing")
		assert.True(t, start.Add(40*time.Minute).Equal(onlySchedule(t, s).NextFireAt))

		clk.Set(start.Add(40 * time.Minute))
		fired, err = sch.RunOnce(c)
		require.NoError(t, err)
		assert.Equal(t, 1, fired)
		jobs := drain(t, q)
		require.Len(t, jobs, 1)
		assert.Equal(t, "thump", string(jobs[0].Payload))

		spec.Spec = "0 * * * *"
		require.NoError(t, beat.Set(c, spec))
		assert.True(t, start.Add(time.Hour).Equal(onlySchedule(t, s).NextFireAt), "a new spec gets a new boundary")

		require.NoError(t, beat.Delete(c))
		all, err := s.Schedules(c)
		require.NoError(t, err)
		assert.Empty(t, all)
		assert.ErrorIs(t, beat.Delete(c), store.ErrNotFound)
		clk.Set(start.Add(2 * time.Hour))
		fired, err = sch.RunOnce(c)
		require.NoError(t, err)
		assert.Zero(t, fired)
	})
}

// TestOneBoundaryOneFire races two schedulers at one due boundary, many
// rounds, released together by a barrier. B's clock runs a second ahead of
// A's and A's lease lasts 100ms, so when A takes the lease first B sees it
// expired and takes it too: both lead and both try to fire, as happens when
// a stalled leader wakes after its successor took over. When B is first, A
// sees a live lease and stands by. Either way the boundary fires once: the
// advance only applies while the boundary is still pending.
func TestOneBoundaryOneFire(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clkA := clockAt(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
		clkB := clockAt(clkA.Now())
		a := e.open(t, store.WithClock(clkA.Now))
		b := e.open(t, store.WithClock(clkB.Now))
		c := ctx(t)
		q := a.Queue("new-year")
		require.NoError(t, a.Schedule("new-year").Set(c, store.ScheduleSpec{Spec: "@yearly", Queue: q.Name()}))
		schA, schB := a.Scheduler("a", store.SchedulerOpts{LeaseTTL: 100 * time.Millisecond}), b.Scheduler("b", store.SchedulerOpts{})
		const rounds = 100
		for round := range rounds {
			boundary := time.Date(2027+round, 1, 1, 0, 0, 0, 0, time.UTC)
			clkA.Set(boundary)
			clkB.Set(boundary.Add(time.Second))
			var wg sync.WaitGroup
			release := make(chan struct{})
			fired := make([]int, 2)
			for i, sch := range []*store.Scheduler{schA, schB} {
				wg.Go(func() {
					<-release
					n, err := sch.RunOnce(c)
					assert.NoError(t, err)
					fired[i] = n
				})
			}
			close(release)
			wg.Wait()
			require.Equal(t, 1, fired[0]+fired[1], "round %d: A fired %d, B fired %d", round, fired[0], fired[1])
		}
		jobs := drain(t, q)
		require.Len(t, jobs, rounds, "one job per boundary")
		seen := map[int]bool{}
		for _, j := range jobs {
			assert.False(t, seen[j.RunAt.Year()], "boundary %s fired twice", j.RunAt)
			seen[j.RunAt.Year()] = true
		}
	})
}

// TestSchedulerHandover: @every 1s with two schedulers running for about
// five seconds. Exactly one leads; cancelling the leader hands over at once
// (the lease is given up and the standby woken through the feed: it leads
// within 10 s, where waiting for the 30 s lease to expire would not), and
// the jobs' boundaries are whole seconds apart: none doubled (one that a
// loaded machine's handover missed collapses into the next fire, as after
// any downtime; asserting consecutive seconds made the test depend on the
// machine's speed).
func TestSchedulerHandover(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		q := s.Queue("ticks")
		require.NoError(t, s.Schedule("tick").Set(c, store.ScheduleSpec{Spec: "@every 1s", Queue: q.Name()}))

		type running struct {
			sch    *store.Scheduler
			cancel context.CancelFunc
			done   chan struct{}
		}
		start := func(owner string, st *store.Store) *running {
			rc, cancel := context.WithCancel(c)
			// Long enough that only a wake can explain a prompt takeover: the
			// lease would not expire for twenty seconds or more.
			sch := st.Scheduler(owner, store.SchedulerOpts{LeaseTTL: 30 * time.Second})
			r := &running{sch: sch, cancel: cancel, done: make(chan struct{})}
			go func() { assert.NoError(t, r.sch.Run(rc)); close(r.done) }()
			return r
		}
		// Each on its own store, as in two processes: the standby hears of the
		// lease given up only through the wake feed.
		one, two := start("one", s), start("two", e.open(t))
		defer one.cancel()
		defer two.cancel()

		queued := func() int64 { return queuedJobs(t, c, q) }
		require.Eventually(t, func() bool { return one.sch.Leading() != two.sch.Leading() }, 10*time.Second, time.Millisecond)
		leader, standby := one, two
		if two.sch.Leading() {
			leader, standby = two, one
		}
		lease, err := s.SchedulerLeader(c)
		require.NoError(t, err)
		require.Equal(t, map[*running]string{one: "one", two: "two"}[leader], lease.Owner)
		require.Eventually(t, func() bool { return queued() >= 2 }, 10*time.Second, time.Millisecond)
		require.False(t, standby.sch.Leading(), "exactly one leader")

		leader.cancel()
		<-leader.done
		require.Eventually(t, standby.sch.Leading, 10*time.Second, time.Millisecond, "the standby takes over")
		require.Eventually(t, func() bool { return queued() >= 5 }, 10*time.Second, time.Millisecond)
		standby.cancel()
		<-standby.done
		lease, err = s.SchedulerLeader(c)
		require.NoError(t, err)
		assert.Empty(t, lease.Owner, "a stopped scheduler gives the lease up")

		jobs := drain(t, q)
		require.GreaterOrEqual(t, len(jobs), 5)
		runAts := make([]time.Time, len(jobs))
		for i, j := range jobs {
			runAts[i] = j.RunAt
		}
		slices.SortFunc(runAts, time.Time.Compare)
		// Each boundary fired once: no fire twice across the handover, every
		// fire on a boundary. A handover slower than a boundary (a loaded
		// machine: 07:59:09 then 07:59:12 in make test at load 20) collapses
		// the boundaries it missed into one fire, as after any downtime.
		for i := 1; i < len(runAts); i++ {
			d := runAts[i].Sub(runAts[i-1])
			assert.True(t, d >= time.Second && d%time.Second == 0, "boundary %d: %s then %s", i, runAts[i-1], runAts[i])
		}
	})
}

// TestScheduleInATransaction: a schedule registered with the business row it
// belongs to exists only if that transaction commits, and so does its
// removal.
func TestScheduleInATransaction(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		c := ctx(t)
		report := s.Schedule("report-42")
		spec := store.ScheduleSpec{Spec: "@daily", Queue: "reports"}
		boom := errors.New("customer rejected")
		err := s.InTx(c, func(c context.Context, tx store.Tx) error {
			require.NoError(t, report.SetTx(c, tx, spec))
			return boom
		})
		require.ErrorIs(t, err, boom)
		all, err := s.Schedules(c)
		require.NoError(t, err)
		assert.Empty(t, all, "rolled back with its transaction")

		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error { return report.SetTx(c, tx, spec) }))
		assert.Equal(t, "report-42", onlySchedule(t, s).Name)

		err = s.InTx(c, func(c context.Context, tx store.Tx) error {
			require.NoError(t, report.DeleteTx(c, tx))
			return boom
		})
		require.ErrorIs(t, err, boom)
		assert.Equal(t, "report-42", onlySchedule(t, s).Name, "the removal rolled back too")
		require.NoError(t, s.InTx(c, func(c context.Context, tx store.Tx) error { return report.DeleteTx(c, tx) }))
		all, err = s.Schedules(c)
		require.NoError(t, err)
		assert.Empty(t, all)

		err = s.InTx(c, func(c context.Context, tx store.Tx) error {
			return s.Schedule("x").SetTx(c, tx, store.ScheduleSpec{Spec: "@daily", Queue: "__alk_outbox:x"})
		})
		require.ErrorIs(t, err, store.ErrReservedName)
	})
}

// TestNewScheduleWakesARunningLeader: a schedule registered from another
// store while the leader runs, its next renewal a minute away and nothing
// else scheduled, fires at its first boundary: the registration wakes the
// leader (or, had it not gone to sleep yet, its next read sees it). That the
// wake alone crosses processes is shown deterministically by
// TestSchedulerHandover, whose standby is asleep for certain.
func TestNewScheduleWakesARunningLeader(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		other := e.open(t)
		c := ctx(t)
		// Let s's wake feed settle first: a message sent and received through
		// it proves its start-up wake to everyone is over, so that wake cannot
		// be what rouses the leader below.
		l, err := s.Listen(c, "settle")
		require.NoError(t, err)
		require.NoError(t, s.Notify(c, "settle", nil))
		_, err = l.Recv(c)
		require.NoError(t, err)
		sch := s.Scheduler("sleeper", store.SchedulerOpts{LeaseTTL: 3 * time.Minute})
		rc, stop := context.WithCancel(c)
		done := make(chan struct{})
		go func() { assert.NoError(t, sch.Run(rc)); close(done) }()
		defer func() { stop(); <-done }()
		require.Eventually(t, sch.Leading, 10*time.Second, time.Millisecond)

		q := other.Queue("woken")
		require.NoError(t, other.Schedule("soon").Set(c, store.ScheduleSpec{Spec: "@every 1s", Queue: q.Name()}))
		require.Eventually(t, func() bool { return queuedJobs(t, c, q) > 0 }, 30*time.Second, time.Millisecond, "fired well before the leader's renewal a minute away")
	})
}

// TestWakesDoNotRenewTheLease: wakes come often (on SQLite every commit wakes
// every waiter), and schedulers must answer them with reads: the leader
// renews its lease once per third of its TTL, and a standby writes nothing
// while the lease is held. Were a renewal answered per wake, each renewal, a
// commit itself, would wake them again: a loop of writes.
func TestWakesDoNotRenewTheLease(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		s := e.open(t)
		other := e.open(t)
		c := ctx(t)
		rc, stop := context.WithCancel(c)
		var wg sync.WaitGroup
		defer func() { stop(); wg.Wait() }()
		var schedulers []*store.Scheduler
		for i, st := range []*store.Store{s, other} {
			sch := st.Scheduler(fmt.Sprint("scheduler-", i), store.SchedulerOpts{LeaseTTL: 3 * time.Minute}) // renewals every minute
			schedulers = append(schedulers, sch)
			wg.Go(func() { assert.NoError(t, sch.Run(rc)) })
		}
		require.Eventually(t, func() bool { return schedulers[0].Leading() || schedulers[1].Leading() }, 10*time.Second, time.Millisecond)
		before, err := s.SchedulerLeader(c)
		require.NoError(t, err)

		// Plenty of wakes: schedule registrations, the fires they cause, and
		// unrelated commits.
		q := other.Queue("beats")
		require.NoError(t, other.Schedule("beat").Set(c, store.ScheduleSpec{Spec: "@every 1s", Queue: q.Name()}))
		for i := range 20 {
			require.NoError(t, other.Schedule(fmt.Sprint("later-", i)).Set(c, store.ScheduleSpec{Spec: "@yearly", Queue: "later"}))
			_, err := other.Queue("unrelated").Enqueue(c, nil, store.EnqueueOpts{})
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool { return queuedJobs(t, c, q) >= 3 }, 30*time.Second, time.Millisecond, "the leader fired three boundaries")

		after, err := s.SchedulerLeader(c)
		require.NoError(t, err)
		assert.Equal(t, before.Owner, after.Owner)
		assert.True(t, before.RenewedAt.Equal(after.RenewedAt), "no renewal between renewal times: %s then %s",
			before.RenewedAt, after.RenewedAt)
	})
}

// TestManyDueSchedulesFireOnceEach: 250 schedules due at once over three
// queues (the scheduler reads them 100 at a time; on PostgreSQL each batch
// fires in one statement), five of them paused, two schedulers racing for
// every boundary: each active schedule enqueues one job per boundary, at
// that boundary, into its own queue; a paused one enqueues nothing.
func TestManyDueSchedulesFireOnceEach(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		clkA := clockAt(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
		clkB := clockAt(clkA.Now())
		a := e.open(t, store.WithClock(clkA.Now))
		b := e.open(t, store.WithClock(clkB.Now))
		c := ctx(t)
		const n, paused = 250, 5
		queues := []*store.Queue{a.Queue("many-0"), a.Queue("many-1"), a.Queue("many-2")}
		for i := range n {
			name := fmt.Sprintf("many-%03d", i)
			require.NoError(t, a.Schedule(name).Set(c, store.ScheduleSpec{Spec: "@daily", Queue: queues[i%3].Name(),
				Payload: []byte(name)}))
			if i < paused {
				require.NoError(t, a.Schedule(name).Pause(c))
			}
		}
		schA, schB := a.Scheduler("a", store.SchedulerOpts{LeaseTTL: 100 * time.Millisecond}), b.Scheduler("b", store.SchedulerOpts{})
		const rounds = 3
		for round := range rounds {
			boundary := time.Date(2026, 6, 2+round, 0, 0, 0, 0, time.UTC)
			clkA.Set(boundary)
			clkB.Set(boundary.Add(time.Second))
			var wg sync.WaitGroup
			release := make(chan struct{})
			fired := make([]int, 2)
			for i, sch := range []*store.Scheduler{schA, schB} {
				wg.Go(func() {
					<-release
					k, err := sch.RunOnce(c)
					assert.NoError(t, err)
					fired[i] = k
				})
			}
			close(release)
			wg.Wait()
			require.Equal(t, n-paused, fired[0]+fired[1], "round %d: A fired %d, B fired %d", round, fired[0], fired[1])
		}
		for qi, q := range queues {
			jobs := drain(t, q)
			per := map[string][]time.Time{}
			for _, j := range jobs {
				per[string(j.Payload)] = append(per[string(j.Payload)], j.RunAt.UTC())
			}
			for i := qi; i < n; i += 3 {
				name := fmt.Sprintf("many-%03d", i)
				if i < paused {
					assert.Empty(t, per[name], "paused %s fired", name)
					continue
				}
				slices.SortFunc(per[name], time.Time.Compare)
				assert.Equal(t, []time.Time{time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC), time.Date(2026, 6, 3, 0, 0, 0, 0, time.UTC),
					time.Date(2026, 6, 4, 0, 0, 0, 0, time.UTC)}, per[name], "%s: one job per boundary, at it", name)
			}
		}
	})
}

// A fire is all or none: when an application's trigger skips the job a
// schedule fires, nothing of the fire happens. The schedule stays at the
// boundary it was to fire, the scheduler reports why, and the fire comes
// once the trigger lets the job through, for that boundary. (PostgreSQL's
// fire moved the schedule on and enqueued nothing, silently, and SQLite's
// said "no rows in result set"; fresh-eyes review of wave 30.) A second
// schedule due beside it fires all the same, also on PostgreSQL's batched
// fire path.
func TestScheduleFireSkippedByATriggerDoesNotMoveOn(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		start, clk, s, q := skippingScheduleStore(t, e)
		c := ctx(t)
		require.NoError(t, s.Schedule("skipped").Set(c, store.ScheduleSpec{Spec: "@every 1m", Queue: q.Name(), Payload: []byte("skip")}))
		require.NoError(t, s.Schedule("fine").Set(c, store.ScheduleSpec{Spec: "@every 1m", Queue: q.Name(), Payload: []byte("ok")}))
		next := func(name string) time.Time {
			t.Helper()
			all, err := s.Schedules(c)
			require.NoError(t, err)
			for _, sc := range all {
				if sc.Name == name {
					return sc.NextFireAt
				}
			}
			t.Fatalf("no schedule %s", name)
			return time.Time{}
		}
		boundary := next("skipped")

		clk.Set(start.Add(90 * time.Second))
		sch := s.Scheduler("skips", store.SchedulerOpts{})
		fired, err := sch.RunOnce(c)
		require.Error(t, err, "the skipped fire is reported")
		assert.ErrorContains(t, err, "a trigger skipped the schedule's job")
		assert.NotErrorIs(t, err, store.ErrNotFound)
		assert.Equal(t, 1, fired, "the other schedule fired")
		assert.True(t, boundary.Equal(next("skipped")), "the schedule stays at the boundary that enqueued nothing")
		jobs := drain(t, q)
		require.Len(t, jobs, 1)
		assert.Equal(t, "ok", string(jobs[0].Payload))

		// Without the trigger, the missed boundary fires.
		if e.name == "pg" {
			e.execSQL(t, "DROP TRIGGER test_skip_jobs ON alkstore.jobs")
		} else {
			e.execSQL(t, "DROP TRIGGER test_skip_jobs")
		}
		fired, err = sch.RunOnce(c)
		require.NoError(t, err)
		assert.Equal(t, 1, fired)
		jobs = drain(t, q)
		require.Len(t, jobs, 1)
		assert.Equal(t, "skip", string(jobs[0].Payload))
		assert.True(t, boundary.Equal(jobs[0].RunAt), "the job is the missed boundary's")
	})
}

// Schedules that fail to fire stay at their boundary, first in firing
// order; a scheduler's round goes on past them to the schedules due behind
// them. It read the first hundred due again and again: a hundred
// schedules whose job a trigger skips starved every later one (fresh-eyes
// review of wave 31).
func TestStuckSchedulesDoNotStarveTheOthers(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		start, clk, s, q := skippingScheduleStore(t, e)
		c := ctx(t)
		for i := range 150 {
			require.NoError(t, s.Schedule(fmt.Sprintf("skip%03d", i)).Set(c, store.ScheduleSpec{Spec: "@every 1m", Queue: q.Name(), Payload: []byte("skip")}))
		}
		clk.Set(start.Add(30 * time.Second)) // due after every skipped one
		require.NoError(t, s.Schedule("late").Set(c, store.ScheduleSpec{Spec: "@every 1m", Queue: q.Name(), Payload: []byte("ok")}))
		clk.Set(start.Add(10 * time.Minute))
		fired, err := s.Scheduler("round", store.SchedulerOpts{}).RunOnce(c)
		require.Error(t, err, "the skipped fires are reported")
		assert.Equal(t, 1, fired, "the schedule behind the stuck ones fires in the same round")
		st, err := q.Stats(c)
		require.NoError(t, err)
		assert.EqualValues(t, 1, st.Ready+st.Scheduled)
	})
}

// skippingScheduleStore is a store on a fake clock at start whose jobs table
// has an application's trigger that skips every job of payload "skip", and
// the queue "fired" schedules enqueue into.
func skippingScheduleStore(t *testing.T, e *engineEnv) (time.Time, *fakeClock, *store.Store, *store.Queue) {
	t.Helper()
	start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clk := clockAt(start)
	s := e.open(t, store.WithClock(clk.Now))
	skipRowsTrigger(t, e, "jobs")
	return start, clk, s, s.Queue("fired")
}

// TestScheduleResumeRacedByReplacesIsNotStored: Resume reads the schedule,
// computes its next boundary from the spec it read, and updates the row
// only if the spec is still that one; a replace in between makes it read
// again. Here every read of Resume's is followed, before its update, by a
// replace from another store that changes the spec (a statement hook on
// GetSchedule), so each of its tries finds the schedule changed: Resume
// gives up with an error matching ErrNotStored (nothing was stored; the
// schedule stays paused), wrapped as the schedule's. Before, the error
// matched no sentinel ("the schedule kept changing; try again").
func TestScheduleResumeRacedByReplacesIsNotStored(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		c := ctx(t)
		spec := store.ScheduleSpec{Spec: "@every 60s", Queue: "beats"}
		var other *store.Store
		var armed atomic.Bool
		var replaces atomic.Int32
		s := e.openHooked(t, func(name string) {
			if name != "GetSchedule" || !armed.Load() {
				return
			}
			sp := spec
			sp.Spec = fmt.Sprintf("@every %ds", 61+replaces.Add(1))
			assert.NoError(t, other.Schedule("beat").Set(c, sp), "the replace between Resume's read and its update")
		})
		other = e.open(t)
		beat := s.Schedule("beat")
		require.NoError(t, beat.Set(c, spec))
		require.NoError(t, beat.Pause(c))

		armed.Store(true)
		err := beat.Resume(c)
		armed.Store(false)
		t.Logf("%s: Resume raced by %d replaces = %v", e.name, replaces.Load(), err)
		require.ErrorIs(t, err, store.ErrNotStored)
		var opErr *store.OpError
		require.ErrorAs(t, err, &opErr)
		assert.True(t, strings.HasPrefix(err.Error(), `alkstore: resume schedule "beat": `), err.Error())
		assert.Positive(t, replaces.Load())
		info, err := beat.Info(c)
		require.NoError(t, err)
		assert.True(t, info.Paused, "nothing was stored: still paused")
		assert.Equal(t, fmt.Sprintf("@every %ds", 61+replaces.Load()), info.Spec, "the last replace's spec")

		require.NoError(t, beat.Resume(c), "unraced, Resume resumes")
		info, err = beat.Info(c)
		require.NoError(t, err)
		assert.False(t, info.Paused)
	})
}

// TestResumeKeepsTheEveryPhase pauses an @every schedule past some of its
// boundaries and resumes it: the next fire is the next boundary of the phase
// it had from registration (registered at :07, it stays on :07 for 1h, and
// on registration + k·90s for 90s), the boundaries passed while paused never
// fire, and the fires after keep the phase. Resumed before its pending
// boundary, the schedule keeps that boundary.
func TestResumeKeepsTheEveryPhase(t *testing.T) {
	start := time.Date(2026, 5, 1, 20, 0, 7, 0, time.UTC)
	cases := []struct {
		spec                string
		every, resume, next time.Duration // resumed at start+resume; next fire start+next
	}{
		{"@every 1h", time.Hour, 5 * time.Minute, time.Hour},
		{"@every 1h", time.Hour, 3*time.Hour + 5*time.Minute, 4 * time.Hour},
		{"@every 90s", 90 * time.Second, 5 * time.Minute, 6 * time.Minute},
		{"@every 90s", 90 * time.Second, 60 * time.Second, 90 * time.Second},
	}
	var forms []string
	for _, tc := range cases {
		forms = append(forms, fmt.Sprintf("%s resumed at +%s", tc.spec, tc.resume))
	}
	eachEngineEachForm(t, forms, func(t *testing.T, e *engineEnv, form int) {
		tc := cases[form]
		clk := clockAt(start)
		s := e.open(t, store.WithClock(clk.Now))
		c := ctx(t)
		q := s.Queue("ticks")
		sch := s.Scheduler("solo", store.SchedulerOpts{})
		tick := s.Schedule("tick")
		require.NoError(t, tick.Set(c, store.ScheduleSpec{Spec: tc.spec, Queue: q.Name(), Payload: []byte("t")}))
		clk.Set(start.Add(30 * time.Second))
		require.NoError(t, tick.Pause(c))

		clk.Set(start.Add(tc.resume))
		require.NoError(t, tick.Resume(c))
		assert.Equal(t, start.Add(tc.next).Format(time.RFC3339), onlySchedule(t, s).NextFireAt.UTC().Format(time.RFC3339),
			"the next boundary of the phase from registration")
		fired, err := sch.RunOnce(c)
		require.NoError(t, err)
		assert.Zero(t, fired, "the boundaries passed while paused never fire")

		clk.Set(start.Add(tc.next))
		fired, err = sch.RunOnce(c)
		require.NoError(t, err)
		assert.Equal(t, 1, fired)
		require.Len(t, drain(t, q), 1)
		assert.Equal(t, start.Add(tc.next+tc.every).Format(time.RFC3339), onlySchedule(t, s).NextFireAt.UTC().Format(time.RFC3339),
			"the fires after keep the phase")
	})
}
