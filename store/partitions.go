package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// PartitionOpts say how far ahead of the offset sequence the event
// partitions reach (PostgreSQL; see docs/design/partitions.md).
type PartitionOpts struct {
	// Size is the number of offsets one partition covers; default
	// 1,000,000, at most 2^40. Retention drops a partition once every
	// event in it is past retention, so smaller partitions free space
	// sooner.
	Size int64
	// Ahead is how many partitions of Size to keep ready beyond the newest
	// offset drawn; default 2, at most 1,000. Offsets beyond them go to
	// the default partition, which is never dropped.
	Ahead int
}

func (o PartitionOpts) withDefaults() (PartitionOpts, error) {
	switch {
	case o.Size < 0 || o.Ahead < 0:
		return o, fmt.Errorf("%w: negative Size or Ahead", ErrInvalidArgument)
	case o.Size > maxPartitionSize:
		return o, fmt.Errorf("%w: Size %d is above %d offsets", ErrInvalidArgument, o.Size, int64(maxPartitionSize))
	case o.Ahead > maxPartitionsAhead:
		return o, fmt.Errorf("%w: Ahead %d is above %d partitions", ErrInvalidArgument, o.Ahead, maxPartitionsAhead)
	}
	if o.Size == 0 {
		o.Size = 1_000_000
	}
	if o.Ahead == 0 {
		o.Ahead = 2
	}
	return o, nil
}

// The bounds of PartitionOpts: partition bounds are offsets (bigint), and
// each partition ahead is a table the server plans every events statement
// with. Size × (Ahead + 1) stays far inside a bigint.
const (
	maxPartitionSize   = 1 << 40
	maxPartitionsAhead = 1_000
)

// CreatePartitions creates the event partitions missing from the newest
// offset drawn up to opts.Ahead partitions beyond it, and returns how many
// it created. It is idempotent, and safe under several janitors at once
// (one creates, the others skip). When a lock it needs is held for longer
// than a short timeout, or the role does not own alkstore.events, it
// creates nothing and returns 0: offsets without a range partition go to
// the tail partition, which the next creation makes a partition of its own
// (scanning its rows once). It never scans the default partition, whatever
// it holds (schema 00012). A role that does not own alkstore.events is
// logged once and reported by Stats.PartitionsDenied. On SQLite, which has
// no partitions, it does nothing.
func (m Maintenance) CreatePartitions(ctx context.Context, opts PartitionOpts) (int64, error) {
	return run(handle{s: m.s}, "create partitions", autoWrite(ctx), func(o target) (int64, error) {
		opts, err := opts.withDefaults()
		if err != nil {
			return 0, err
		}
		n, err := o.createPartitions(ctx, opts)
		if errors.Is(err, errPartitionsDenied) {
			m.s.deniedLog.Do(func() {
				m.s.log.Warn("alkstore: this role does not own alkstore.events, so it cannot create or drop event partitions: " +
					"retention and trims delete events row by row (Stats.PartitionsDenied)")
			})
			return 0, nil
		}
		return n, err
	})
}

// DropExpiredPartitions drops every event partition whose events are all
// past their stream's Retention (streams without one keep theirs, and a
// compacted stream's current heads keep theirs), and returns how many it
// dropped; their events are not counted (that would read them). Keys of
// other streams whose head it drops become headless, as with
// ApplyRetention. A partition it cannot drop within a short lock timeout
// waits for a later pass; ApplyRetention's row deletes handle what
// partitions cannot. Each drop commits on its own, so on an error (the
// context ending mid-pass, say) it still returns the partitions it
// dropped before it. On SQLite it does nothing.
func (m Maintenance) DropExpiredPartitions(ctx context.Context) (int64, error) {
	// run returns the zero value with an error: the drops already
	// committed are counted outside it. Without this, a janitor pass whose
	// budget ended after its drops reported none (PartitionsDropped 0),
	// which TestRetentionDropsWholePartitions met under load.
	var dropped int64
	_, err := run(handle{s: m.s}, "drop expired partitions", autoWrite(ctx), func(o target) (int64, error) {
		n, _, err := o.dropExpiredPartitions(ctx, m.s.now(), "", 0)
		dropped = n
		return n, err
	})
	return dropped, err
}

// partitionLockTimeout bounds how long partition DDL waits for a table
// lock, and so how long publishers and readers queued behind it wait.
const partitionLockTimeout = 200 * time.Millisecond

// retentionGrace is how long past a sealed partition's expiry
// ApplyRetention's row deletes still leave its events to a drop, which
// each janitor pass attempts before them: a drop that failed for a moment
// (a held lock, the settled horizon behind) gets later passes first.
const retentionGrace = time.Minute

// partitionLockID is the advisory lock partition DDL runs under ("alkspart").
const partitionLockID = 0x616c6b7370617274

var errPartitionSkipped = fmt.Errorf("partition left for a later pass")

// errPartitionsDenied: the role may not create partitions (42501).
var errPartitionsDenied = fmt.Errorf("partitions denied to this role")
