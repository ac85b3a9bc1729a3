package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/alkstore/alkstore/store"
)

var (
	retentionN     = flag.Int64("retention-events", 1_000_000, "old events the retention section removes")
	retentionBatch = flag.Int("retention-batch", 500, "rows per ApplyRetention statement in the retention section (the janitor's default)")
)

// benchRetention times removing retentionN events past retention on
// PostgreSQL, each way on a fresh database holding the same data: the
// events fill one partition, which DropExpiredPartitions drops whole; or
// ApplyRetention deletes them in batches of retentionBatch rows, as it
// does wherever a partition also holds live events (the unpartitioned
// cost: the row statements are the same on a plain table). Beside them
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
}

func retentionRun(ctx context.Context, dsn string, partitions bool) time.Duration {
	n := *retentionN
	s := must(store.Open(ctx, dsn, store.WithClock(func() time.Time { return time.Now().Add(2 * time.Hour) })))
	defer s.Close()
	m := s.Maintenance()
	// One partition of exactly n offsets will hold the old events.
	must(m.CreatePartitions(ctx, store.PartitionOpts{Size: n, Ahead: 2}))
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
