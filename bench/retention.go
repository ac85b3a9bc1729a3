package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/alkstore/alkstore/janitor"
	"github.com/alkstore/alkstore/store"
)

var (
	retentionN     = flag.Int64("retention-events", 1_000_000, "old events the retention section removes")
	retentionBatch = flag.Int("retention-batch", 500, "rows per ApplyRetention statement in the retention section (the janitor's default)")
	// The steady state: a publisher at a constant rate, a janitor on its
	// interval. Each partition fills in size/rate seconds; the defaults
	// (10^6 offsets, 30 s) at 1,000 events/s fill one in 1,000 s, too long
	// for a bench run, so the run scales both down by 1,000 and 300 (the
	// scenario of issue 26: partitions of 1,000, a pass every 100 ms, 2 s
	// retention, 12 s); -steady-size 1000000 -steady-interval 30s
	// -steady-for 40m runs the defaults themselves.
	steadyRate      = flag.Int("steady-rate", 1000, "events/s the steady-state retention run publishes")
	steadySize      = flag.Int64("steady-size", 1000, "partition size in the steady-state retention run")
	steadyInterval  = flag.Duration("steady-interval", 100*time.Millisecond, "janitor interval in the steady-state retention run")
	steadyRetention = flag.Duration("steady-retention", 2*time.Second, "stream retention in the steady-state retention run")
	steadyFor       = flag.Duration("steady-for", 12*time.Second, "length of the steady-state retention run")
)

// benchRetention times removing retentionN events past retention on
// PostgreSQL, each way on a fresh database holding the same data: the
// events fill one partition, which DropExpiredPartitions drops whole; or
// ApplyRetention deletes them in batches of retentionBatch rows from the
// default partition, as it does wherever a drop cannot take them (the
// unpartitioned cost: the row statements are the same on a plain table). Beside them
// sits an event of a stream without retention, in the next partition,
// which both keep. Only with -only retention: loading the events takes a
// while.
func benchRetention(ctx context.Context, newDSN func() string) {
	drop := retentionRun(ctx, newDSN(), true)
	rows := retentionRun(ctx, newDSN(), false)
	what := fmt.Sprintf("retention, %d old events (ms)", *retentionN)
	fmt.Printf("%-8s %-44s %14s %14s %7s\n", "", "", "drop", "row deletes", "speedup")
	fmt.Printf("%-8s %-44s %14.1f %14.1f %7.0f\n", "pg", what,
		float64(drop.Microseconds())/1000, float64(rows.Microseconds())/1000, rows.Seconds()/drop.Seconds())
	steadyRetentionRun(ctx, newDSN())
}

// steadyRetentionRun publishes steadyRate events/s to one stream with
// steadyRetention for steadyFor while a janitor passes every
// steadyInterval with partitions of steadySize, and reports which way the
// events it removed went: by partition drops (what the design promises in
// steady state; goal >= 95%) or by row deletes.
func steadyRetentionRun(ctx context.Context, dsn string) {
	s := must(store.Open(ctx, dsn))
	defer s.Close()
	opts := store.PartitionOpts{Size: *steadySize}
	must(s.Maintenance().CreatePartitions(ctx, opts))
	st := s.Stream("steady")
	must0(st.Configure(ctx, store.StreamConfig{Retention: *steadyRetention}))
	j := janitor.New(s, janitor.Opts{Interval: *steadyInterval, Partitions: opts})

	var published atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // steadyRate/100 events every 10 ms
		defer close(done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		batch := make([]store.Message, max(*steadyRate/100, 1))
		for i := range batch {
			batch[i].Payload = make([]byte, 128)
		}
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				published.Add(int64(len(must(st.PublishMany(ctx, batch)))))
			}
		}
	}()
	var total janitor.Report
	end := time.Now().Add(*steadyFor)
	for time.Now().Before(end) {
		r := must(j.RunOnce(ctx))
		total.PartitionsCreated += r.PartitionsCreated
		total.PartitionsDropped += r.PartitionsDropped
		total.RetentionDeleted += r.RetentionDeleted
		time.Sleep(*steadyInterval)
	}
	close(stop)
	<-done
	pool := must(pgxpool.New(ctx, dsn))
	defer pool.Close()
	var left int64
	must0(pool.QueryRow(ctx, `SELECT count(*) FROM alkstore.events WHERE stream = 'steady'`).Scan(&left))
	removed := published.Load() - left
	byDrops := removed - total.RetentionDeleted
	share := 0.0
	if removed > 0 {
		share = 100 * float64(byDrops) / float64(removed)
	}
	fmt.Printf("%-8s steady state: %d events/s, retention %v, partitions of %d, a pass every %v, for %v\n",
		"pg", *steadyRate, *steadyRetention, *steadySize, *steadyInterval, *steadyFor)
	fmt.Printf("%-8s   published %d, removed %d: %d by %d partition drops, %d by row deletes; by drops %.1f%%\n",
		"", published.Load(), removed, byDrops, total.PartitionsDropped, total.RetentionDeleted, share)
}

func retentionRun(ctx context.Context, dsn string, partitions bool) time.Duration {
	n := *retentionN
	s := must(store.Open(ctx, dsn, store.WithClock(func() time.Time { return time.Now().Add(2 * time.Hour) })))
	defer s.Close()
	m := s.Maintenance()
	// One partition of exactly n offsets will hold the old events. Row
	// deletes run without range partitions (the default one holds the
	// events): ApplyRetention leaves events in a range partition to its
	// drop, until the drop has had its chance.
	if partitions {
		must(m.CreatePartitions(ctx, store.PartitionOpts{Size: n, Ahead: 2}))
	}
	must0(s.Stream("old").Configure(ctx, store.StreamConfig{Retention: time.Hour}))
	pool := must(pgxpool.New(ctx, dsn))
	defer pool.Close()
	// Setup, not the library's path: one statement loads them all.
	_, err := pool.Exec(ctx, `INSERT INTO alkstore.events (id, stream, payload, txid)
		SELECT nextval('alkstore.event_offset_seq'), 'old', $2, pg_current_xact_id()
		FROM generate_series(1, $1::bigint)`, n, make([]byte, 128))
	must0(err)
	kept := must(s.Stream("keep").Publish(ctx, []byte("kept")))
	_, err = pool.Exec(ctx, `VACUUM ANALYZE alkstore.events`)
	must0(err)

	start := time.Now()
	if partitions && must(m.DropExpiredPartitions(ctx)) == 0 {
		log.Fatal("retention dropped no partition")
	}
	for {
		if k := must(m.ApplyRetention(ctx, *retentionBatch)); k < int64(*retentionBatch) {
			break
		}
	}
	elapsed := time.Since(start)
	var left int64
	must0(pool.QueryRow(ctx, `SELECT count(*) FROM alkstore.events WHERE stream = 'old'`).Scan(&left))
	if left != 0 {
		log.Fatalf("retention left %d of %d events", left, n)
	}
	if evs := must(s.Stream("keep").ReadSince(ctx, 0, 10)); len(evs) != 1 || evs[0].Offset != kept {
		log.Fatalf("the kept event is gone: %v", evs)
	}
	return elapsed
}
