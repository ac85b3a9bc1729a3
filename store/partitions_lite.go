package store

import (
	"context"
	"time"
)

// SQLite has no partitions: alk_events is one table, and retention and
// trims delete rows.

func (o liteOps) createPartitions(context.Context, PartitionOpts) (int64, error) { return 0, nil }

func (o liteOps) dropExpiredPartitions(context.Context, time.Time, string, int64) (int64, int64, error) {
	return 0, 0, nil
}
