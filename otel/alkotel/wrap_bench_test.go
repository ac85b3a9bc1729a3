package alkotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/alkstore/alkstore/store"
)

// BenchmarkHandlerWrap is the handler wrapper alone, without a database:
// its CPU and allocations per job.
func BenchmarkHandlerWrap(b *testing.B) {
	now := time.Now()
	for _, v := range instrumentations() {
		b.Run(v.name, func(b *testing.B) {
			h := store.Handler(func(context.Context, *store.Job) error { return nil })
			if v.inst != nil {
				h = v.inst.Handler(h)
			}
			j := &store.Job{ID: 1, Queue: "q", Attempts: 1, MaxAttempts: 25, CreatedAt: now, RunAt: now, ClaimedAt: &now,
				Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_ = h(ctx, j)
			}
		})
	}
}
