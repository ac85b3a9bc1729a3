package tests

// Consumer groups: the promises a review found broken (issue 22), one test
// each, on both engines.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestGroupStoreCloseLetsTheEventInFlightCommit: closing the store while a
// Consume (or ConsumeTx) handler runs lets it finish and commit before the
// member leaves; another member never gets the key's events meanwhile.
// Before the fix the shutdown closed the member first: its partition went to
// the other member under the running handler, whose commit then failed.
func TestGroupStoreCloseLetsTheEventInFlightCommit(t *testing.T) {
	for _, tx := range []bool{false, true} {
		t.Run(fmt.Sprint("tx=", tx), func(t *testing.T) {
			eachEngine(t, func(t *testing.T, e *engineEnv) {
				c := ctx(t)
				sa, err := store.Open(c, e.dsn)
				require.NoError(t, err)
				sb := e.open(t)
				createEffects(t, sb)
				st := sb.Stream("s")
				off1, err := st.PublishWithKey(c, "k", []byte("1"))
				require.NoError(t, err)
				off2, err := st.PublishWithKey(c, "k", []byte("2"))
				require.NoError(t, err)
				// b joins first (a SQLite join waits for the writer a's
				// transaction holds); "a…" < "b…": the partition is a's share.
				b, err := st.Group("g").Join(c, store.GroupOpts{Member: "b", Partitions: 1})
				require.NoError(t, err)
				inHandler, release := make(chan struct{}), make(chan struct{})
				var handled sync.Map
				opts := store.GroupOpts{Member: "a", Partitions: 1, LeaseTTL: time.Hour}
				consumed := make(chan error, 1)
				go func() {
					g := sa.Stream("s").Group("g")
					handle := func(ev store.Event) {
						if _, again := handled.LoadOrStore(ev.Offset, true); !again {
							close(inHandler)
						}
						<-release
					}
					if tx {
						consumed <- g.ConsumeTx(context.Background(), opts, func(ctx context.Context, tx store.Tx, ev store.Event) error {
							handle(ev)
							return writeEffect(ctx, tx, ev.Offset)
						})
						return
					}
					consumed <- g.Consume(context.Background(), opts, func(ctx context.Context, ev store.Event) error {
						handle(ev)
						return nil
					})
				}()
				<-inHandler // a handles off1 and holds the only partition
				closed := make(chan error, 1)
				go func() { closed <- sa.Close() }()
				// While a's handler runs, b gets nothing: the partition is a's
				// until a leaves (an hour's lease: only a leave hands it over).
				rc, cancel := context.WithTimeout(c, time.Second)
				ev, err := b.Recv(rc)
				cancel()
				require.Error(t, err, "b got event %d of key k while a's handler of %d still runs", ev.Offset, off1)
				close(release)
				require.ErrorIs(t, <-consumed, store.ErrClosed)
				require.NoError(t, <-closed)
				// a committed what it handled, then left: b goes on from off2.
				ev, err = b.Recv(c)
				require.NoError(t, err)
				assert.Equal(t, off2, ev.Offset, "a's event in flight was committed")
				if tx {
					assert.Equal(t, map[int64]int{off1: 1}, effects(t, sb))
				}
				require.NoError(t, b.Close())
			})
		})
	}
}
