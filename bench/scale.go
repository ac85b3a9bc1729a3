package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alkstore/alkstore/store"
)

// The scale section (`go run ./bench -only scale`, not in the default run):
// the hot operations and the janitor's passes timed beside growing amounts
// of unrelated data, to show which costs follow the table instead of the
// work. Each size adds rows to the same database, so a run loads the
// largest size once.
//
// The unrelated rows are loaded with set-based SQL through Tx.Exec (test
// data, not library statements); everything timed goes through the public
// API. At size N they are, in round figures:
//
//	0.5 N  events of stream "big" (plain, 30-day retention, within it)
//	0.1 N  events of compacted stream "kv": 0.05 N keys, each with a
//	       superseded event younger than the stream's minimum compaction lag
//	       and a head; one key in ten a young tombstone
//	0.05 N head rows of those keys, 0.05 N headless rows (not yet expired)
//	0.1 N  delayed jobs of queue "later" (due tomorrow, expiring after)
//	0.2 N  dead jobs of queue "old"
//
// so every pass has rows to look at and none to change: its figure is the
// cost of finding nothing, which a pass driven by indexes keeps flat.
//
// Latencies are medians over -scale-d; the 8-publisher rate runs for -d,
// like the default sections. -scale-engines=pg runs one engine.
var (
	scaleSizes = flag.String("scale-sizes", "1e5,1e6,1e7", "scale section: total unrelated rows at each step, ascending")
	scaleDur   = flag.Duration("scale-d", time.Second, "scale section: time spent on each figure at each size")
	scaleOn    = flag.String("scale-engines", "pg,lite", "scale section: the engines to run it on")
	scaleKeep  = flag.String("scale-lite-db", "", "scale section: put SQLite's database at this path (a new file) and keep it, "+
		"to study a statement on the data the run measured; default: a temporary file")
)

// scaleFig is one row of the scale table: a cost per call (latency) or a
// rate (throughput). ratio reports cost growth for both: above 1 is slower.
type scaleFig struct {
	name string
	rate bool
	vals []float64
}

func (f *scaleFig) ratio(i int) float64 {
	if f.rate {
		return f.vals[0] / f.vals[i]
	}
	return f.vals[i] / f.vals[0]
}

// scaleTarget is how the scale section loads rows on one engine.
type scaleTarget struct {
	name  string
	s     *store.Store
	load  func(ctx context.Context, tx store.Tx, from, to scaleCounts, now time.Time) error
	after func(ctx context.Context) error           // once loaded: what autovacuum would have done by then
	size  func(ctx context.Context) (db, wal int64) // bytes on disk
}

// scaleCounts are the unrelated rows at one size, by kind.
type scaleCounts struct{ big, keys, headless, delayed, dead int64 }

func countsAt(n int64) scaleCounts {
	return scaleCounts{big: n / 2, keys: n / 20, headless: n / 20, delayed: n / 10, dead: n / 5}
}

func parseSizes(s string) []int64 {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v < 1000 {
			log.Fatalf("-scale-sizes: %q is not a size of at least 1000", f)
		}
		if len(out) > 0 && int64(v) <= out[len(out)-1] {
			log.Fatalf("-scale-sizes: sizes must ascend")
		}
		out = append(out, int64(v))
	}
	return out
}

func benchScale(ctx context.Context, t scaleTarget) {
	sizes := parseSizes(*scaleSizes)
	s := t.s
	now := time.Now()
	payload := make([]byte, 128)
	must0(s.Stream("big").Configure(ctx, store.StreamConfig{Retention: 30 * 24 * time.Hour}))
	must0(s.Stream("kv").Configure(ctx, store.StreamConfig{Compacted: true, Retention: 30 * 24 * time.Hour,
		MinCompactionLag: 7 * 24 * time.Hour, HeadlessTTL: 24 * time.Hour}))

	figs := []*scaleFig{}
	fig := func(name string, rate bool) *scaleFig {
		f := &scaleFig{name: name, rate: rate}
		figs = append(figs, f)
		return f
	}
	var (
		fPublish   = fig("Publish, 1 publisher (µs)", false)
		fPublish8  = fig("Publish, 8 publishers (events/s)", true)
		fReadSmall = fig("ReadSince, a stream of 5 events per size (µs)", false)
		fReadBig   = fig("ReadSince 100, big stream (µs)", false)
		fReadCons  = fig("ReadFromConsumer 100, big stream (µs)", false)
		fEnqueue   = fig("Enqueue, 1 producer (µs)", false)
		fClaim     = fig("Claim 1 + Ack, 1 worker (µs)", false)
		fClaim8    = fig("Claim 10 + AckMany, 8 workers (jobs/s)", true)
		fPasses    = []*scaleFig{
			fig("ApplyRetention, nothing due (µs)", false),
			fig("CompactSuperseded, nothing due (µs)", false),
			fig("DeleteExpiredTombstones, none (µs)", false),
			fig("DeleteExpiredHeadless, none (µs)", false),
			fig("SweepExpiredJobs, none (µs)", false),
		}
		fStats = fig("Store.Stats (µs)", false)
		fSize  = fig("database size (MB)", false)
		fWAL   = fig("of which SQLite WAL (MB)", false)
	)
	m := s.Maintenance()
	passes := []func(context.Context, int) (int64, error){
		m.ApplyRetention, m.CompactSuperseded, m.DeleteExpiredTombstones, m.DeleteExpiredHeadless, m.SweepExpiredJobs,
	}

	start := time.Now()
	var loaded scaleCounts
	tiny, small, big := s.Stream("tiny"), s.Stream("small"), s.Stream("big")
	work, burn := s.Queue("work"), s.Queue("burn")
	for _, n := range sizes {
		// Load the rows this size adds, in one transaction.
		lstart := time.Now()
		next := countsAt(n)
		must0(s.InTx(ctx, func(ctx context.Context, tx store.Tx) error { return t.load(ctx, tx, loaded, next, now) }))
		loaded = next
		must0(t.after(ctx))
		// Five events of the tiny stream after every load, so its events
		// lie at the far end of the table from most of the big stream's.
		newest := slices.Max(must(tiny.PublishMany(ctx, make([]store.Message, 5))))
		bigFrom := quarterOffset(ctx, big, newest)
		must0(big.SaveOffset(ctx, "reader", bigFrom))
		log.Printf("scale %s: %.0e rows loaded in %s", t.name, float64(n), time.Since(lstart).Round(time.Second))

		fPublish.vals = append(fPublish.vals, latency(0, func() error { _, err := small.Publish(ctx, payload); return err }))
		fPublish8.vals = append(fPublish8.vals, max(
			once(8, func() error { _, err := small.Publish(ctx, payload); return err }),
			once(8, func() error { _, err := small.Publish(ctx, payload); return err })))
		fReadSmall.vals = append(fReadSmall.vals, latency(0, func() error {
			evs, err := tiny.ReadSince(ctx, 0, 100)
			if err == nil && len(evs) == 0 {
				err = fmt.Errorf("tiny stream read nothing")
			}
			return err
		}))
		fReadBig.vals = append(fReadBig.vals, latency(0, func() error {
			evs, err := big.ReadSince(ctx, bigFrom, 100)
			if err == nil && len(evs) != 100 {
				err = fmt.Errorf("big stream read %d events, not 100", len(evs))
			}
			return err
		}))
		fReadCons.vals = append(fReadCons.vals, latency(0, func() error {
			evs, err := big.ReadFromConsumer(ctx, "reader", 100)
			if err == nil && len(evs) != 100 {
				err = fmt.Errorf("consumer read %d events, not 100", len(evs))
			}
			return err
		}))
		var enqueued atomic.Int64
		fEnqueue.vals = append(fEnqueue.vals, latency(0, func() error {
			_, err := work.Enqueue(ctx, payload, store.EnqueueOpts{})
			enqueued.Add(1)
			return err
		}))
		fClaim.vals = append(fClaim.vals, latency(int(enqueued.Load()), func() error {
			jobs, err := work.Claim(ctx, "w", 1, time.Minute)
			if err == nil && len(jobs) != 1 {
				err = fmt.Errorf("claimed %d jobs, not 1", len(jobs))
			}
			if err == nil {
				err = jobs[0].Ack(ctx)
			}
			return err
		}))
		fClaim8.vals = append(fClaim8.vals, max(burnRate(ctx, burn, payload), burnRate(ctx, burn, payload)))
		for i, pass := range passes {
			fPasses[i].vals = append(fPasses[i].vals, latency(0, func() error {
				k, err := pass(ctx, 1000)
				if err == nil && k != 0 {
					err = fmt.Errorf("%s changed %d rows: the data set should give it nothing to do", fPasses[i].name, k)
				}
				return err
			}))
		}
		fStats.vals = append(fStats.vals, latency(0, func() error { _, err := s.Stats(ctx); return err }))
		db, wal := t.size(ctx)
		fSize.vals = append(fSize.vals, float64(db+wal)/1e6)
		if t.name == "lite" {
			fWAL.vals = append(fWAL.vals, float64(wal)/1e6)
		}
	}

	fmt.Printf("\n%-8s %-46s", "engine", "scale: cost beside N unrelated rows")
	for i, n := range sizes {
		fmt.Printf(" %10s", fmt.Sprintf("N=%.0e", float64(n)))
		if i > 0 {
			fmt.Printf(" %6s", "×")
		}
	}
	fmt.Println()
	for _, f := range figs {
		if len(f.vals) == 0 {
			continue
		}
		fmt.Printf("%-8s %-46s", t.name, f.name)
		for i, v := range f.vals {
			fmt.Printf(" %10.0f", v)
			if i > 0 {
				fmt.Printf(" %6.2f", f.ratio(i))
			}
		}
		fmt.Println()
	}
	fmt.Printf("%-8s (× is the cost beside the first size: 1.00 flat, above 1 slower; goal ≤ 1.5 at 1e7; run took %s)\n",
		t.name, time.Since(start).Round(time.Second))
}

// quarterOffset returns the offset a quarter of the way from the big
// stream's first event to before, which lies before the newest load of the
// big stream, so 100 of its events follow it.
func quarterOffset(ctx context.Context, big *store.Stream, before int64) int64 {
	first := must(big.ReadSince(ctx, 0, 1))
	if len(first) == 0 {
		log.Fatal("scale: the big stream is empty")
	}
	return first[0].Offset + (before-first[0].Offset)/4
}

// latency calls op for the measurement time (at least 3 times, at most
// limit times when limit > 0) after one warm-up call, and returns the
// median call in microseconds.
func latency(limit int, op func() error) float64 {
	must0(op())
	if limit > 0 {
		limit--
	}
	var took []time.Duration
	deadline := time.Now().Add(*scaleDur)
	for len(took) < 3 || time.Now().Before(deadline) {
		if limit > 0 && len(took) >= limit {
			break
		}
		t0 := time.Now()
		must0(op())
		took = append(took, time.Since(t0))
	}
	slices.Sort(took)
	return float64(took[len(took)/2].Microseconds())
}

// burnRate fills queue q with jobs, then claims and acks them all from 8
// goroutines (Claim 10, AckMany), and returns jobs per second.
func burnRate(ctx context.Context, q *store.Queue, payload []byte) float64 {
	const total = 20000
	jobs := make([]store.NewJob, 1000)
	for i := range jobs {
		jobs[i].Payload = payload
	}
	for i := 0; i < total; i += len(jobs) {
		must(q.EnqueueMany(ctx, jobs))
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				js, err := q.Claim(ctx, fmt.Sprint("b", w), 10, time.Minute)
				must0(err)
				if len(js) == 0 {
					return
				}
				k, err := q.AckMany(ctx, js)
				must0(err)
				done.Add(k)
			}
		}()
	}
	wg.Wait()
	if done.Load() != total {
		log.Fatalf("scale: burn-down acked %d jobs of %d", done.Load(), total)
	}
	return total / time.Since(start).Seconds()
}

// fileSizes are the sizes of a SQLite database and its WAL.
func fileSizes(path string) (db, wal int64) {
	if fi, err := os.Stat(path); err == nil {
		db = fi.Size()
	}
	if fi, err := os.Stat(path + "-wal"); err == nil {
		wal = fi.Size()
	}
	return db, wal
}
