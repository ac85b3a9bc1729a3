package console

import (
	"context"
	"sync"
	"time"

	"github.com/alkstore/alkstore/store"
)

// snapshot is what the overview shows: one read of the store
// (Store.Queues, Store.Streams, Store.Schedules), shared by every viewer.
type snapshot struct {
	At        time.Time
	Queues    []store.QueueInfo
	Streams   []store.StreamStats
	Schedules []store.ScheduleInfo
	Horizon   store.HorizonStats
	Err       error
}

// sample is one point of the charts: per queue its depth (ready and
// scheduled), running and finished counts; per consumer its lag.
type sample struct {
	At       time.Time
	Depth    map[string]int64 // queue → ready + scheduled
	Running  map[string]int64
	Finished map[string]int64 // queue → completed + cancelled + expired + dead (kept jobs)
	Lag      map[string]int64 // "stream/consumer" → lag
}

// sampler keeps the latest snapshot and the last hour of samples. One
// goroutine reads the store: after a change the store's wake feed reports
// (at most once per minGap), and every interval for the charts. Viewers
// never read the overview from the database themselves.
type sampler struct {
	st       *store.Store
	clock    func() time.Time
	interval time.Duration
	minGap   time.Duration
	keep     int // samples kept: an hour's worth

	mu      sync.Mutex
	snap    snapshot
	samples []sample
	version int64
	subs    map[chan int64]struct{}
	ready   chan struct{} // closed once the first snapshot is in
	once    sync.Once
}

func newSampler(st *store.Store, interval time.Duration, clock func() time.Time) *sampler {
	return &sampler{st: st, clock: clock, interval: interval, minGap: 250 * time.Millisecond,
		keep: int(time.Hour/interval) + 1, subs: map[chan int64]struct{}{}, ready: make(chan struct{})}
}

// run reads a snapshot now, then on every change and every interval,
// until ctx ends.
func (s *sampler) run(ctx context.Context) {
	defer s.once.Do(func() { close(s.ready) }) // never leave a page waiting for a sampler that stopped
	changes, err := s.st.Changes(ctx)
	if err != nil {
		s.refresh(ctx, true)
		return
	}
	s.refresh(ctx, true)
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-changes:
			if !ok {
				return
			}
			if wait := s.minGap - time.Since(last); wait > 0 { // coalesce bursts of writes
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			last = time.Now()
			s.refresh(ctx, false)
		case <-tick.C:
			last = time.Now()
			s.refresh(ctx, true)
		}
	}
}

// refresh reads the store once; with record it also adds a chart sample.
func (s *sampler) refresh(ctx context.Context, record bool) {
	snap := snapshot{At: time.Now()}
	sampledAt := s.clock()
	snap.Queues, snap.Err = s.st.Queues(ctx)
	if snap.Err == nil {
		snap.Streams, snap.Err = s.st.Streams(ctx)
	}
	if snap.Err == nil {
		snap.Schedules, snap.Err = s.st.Schedules(ctx)
	}
	if snap.Err == nil {
		snap.Horizon, snap.Err = s.st.Horizon(ctx)
	}
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snap = snap
	s.version++
	s.once.Do(func() { close(s.ready) })
	if record && snap.Err == nil {
		p := sample{At: sampledAt, Depth: map[string]int64{}, Running: map[string]int64{}, Finished: map[string]int64{}, Lag: map[string]int64{}}
		for _, q := range snap.Queues {
			p.Depth[q.Name] = q.Stats.Ready + q.Stats.Scheduled
			p.Running[q.Name] = q.Stats.Running
			p.Finished[q.Name] = q.Stats.Completed + q.Stats.Cancelled + q.Stats.Expired + q.Stats.Dead
		}
		for _, st := range snap.Streams {
			for _, c := range st.Consumers {
				p.Lag[st.Name+"/"+c.Consumer] = c.Lag
			}
		}
		s.samples = append(s.samples, p)
		cut := 0 // older than an hour, or past the count an hour holds
		for cut < len(s.samples) && (sampledAt.Sub(s.samples[cut].At) > time.Hour || len(s.samples)-cut > s.keep) {
			cut++
		}
		s.samples = append(s.samples[:0], s.samples[cut:]...)
	}
	for c := range s.subs {
		select {
		case c <- s.version:
		default: // the viewer has one pending: it will read the latest
		}
	}
}

// latest returns the current snapshot and the samples (copies), waiting
// for the first snapshot (or ctx).
func (s *sampler) latest(ctx context.Context) (snapshot, []sample, int64) {
	select {
	case <-s.ready:
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap, append([]sample(nil), s.samples...), s.version
}

// subscribe returns a channel receiving each new snapshot's version.
func (s *sampler) subscribe() (<-chan int64, func()) {
	c := make(chan int64, 1)
	s.mu.Lock()
	s.subs[c] = struct{}{}
	s.mu.Unlock()
	return c, func() {
		s.mu.Lock()
		delete(s.subs, c)
		s.mu.Unlock()
	}
}
