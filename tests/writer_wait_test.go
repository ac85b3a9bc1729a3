package tests

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// warnings is a slog handler that keeps the store's warnings and signals
// the first.
type warnings struct {
	mu    sync.Mutex
	msgs  []string
	first chan struct{}
	once  sync.Once
}

func newWarnings() *warnings { return &warnings{first: make(chan struct{})} }

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnings) WithGroup(string) slog.Handler                { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	w.mu.Lock()
	w.msgs = append(w.msgs, b.String())
	w.mu.Unlock()
	w.once.Do(func() { close(w.first) })
	return nil
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// TestWriteBehindOwnBegunTxIsNamed: an auto-commit write made on the
// goroutine that holds a Begin'd transaction. On SQLite that transaction
// holds the writer slot, so the write waits for itself; after a second the
// store logs once, naming where the transaction was begun, and the write
// ends with its context. On Postgres the write runs on another connection
// and nothing is logged. Before: SQLite waited silently.
func TestWriteBehindOwnBegunTxIsNamed(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		w := newWarnings()
		s := e.open(t, store.WithLogger(slog.New(w)))
		q := s.Queue("orders")
		_, file, line, _ := runtime.Caller(0)
		tx, err := s.Begin(ctx(t)) // the site the warning must name: the next line
		require.NoError(t, err)
		site := fmt.Sprintf("tx_begun_at=%s:%d ", file, line+1)
		defer tx.Rollback(ctx(t))

		if e.name == "pg" {
			_, err = q.Enqueue(ctx(t), []byte("x"), store.EnqueueOpts{})
			require.NoError(t, err)
			assert.Empty(t, w.all())
			return
		}
		c, cancel := context.WithCancel(ctx(t))
		defer cancel()
		go func() { <-w.first; cancel() }() // the warning came: stop waiting
		_, err = q.Enqueue(c, []byte("x"), store.EnqueueOpts{})
		require.ErrorIs(t, err, context.Canceled, "the write waited for the transaction until its ctx ended")
		// Another wait behind the same transaction (here a Begin) logs
		// nothing more.
		c, cancel = context.WithTimeout(ctx(t), 2500*time.Millisecond)
		defer cancel()
		_, err = s.Begin(c)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		msgs := w.all()
		require.Len(t, msgs, 1, "one warning per transaction")
		assert.Contains(t, msgs[0], "writer slot")
		assert.Contains(t, msgs[0], site, "names where the transaction was begun")
		assert.Contains(t, msgs[0], `op=enqueue`)
		assert.Contains(t, msgs[0], `name=orders`)
	})
}

// TestWriteBehindWorkTxHandlerTxIsNamed: a WorkTx handler's transaction
// (on SQLite it holds the writer slot while the handler runs) keeps an
// auto-commit write of another goroutine waiting. The warning names the
// transaction by what the store began it for, the WorkTx handler of the
// queue, never a frame of the runtime: the store begins it on a
// goroutine of its own, whose stack holds no caller outside the store,
// and before (703994a) the warning named runtime/asm_amd64.s
// ("tx_begun_at=.../src/runtime/asm_amd64.s:1264") (review54a F4). On
// Postgres the write runs on another connection and nothing is logged.
func TestWriteBehindWorkTxHandlerTxIsNamed(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *engineEnv) {
		w := newWarnings()
		s := e.open(t, store.WithLogger(slog.New(w)))
		q := s.Queue("worktx-held")
		_, err := q.Enqueue(ctx(t), []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)
		inTx, release := make(chan struct{}), make(chan struct{})
		wc, stop := context.WithCancel(ctx(t))
		var wg sync.WaitGroup
		defer wg.Wait()
		defer stop()
		wg.Go(func() {
			_ = q.WorkTx(wc, store.WorkOpts{Concurrency: 1, Visibility: time.Minute, Timeout: time.Minute},
				func(ctx context.Context, tx store.Tx, j *store.Job) error {
					close(inTx)
					select {
					case <-release:
					case <-ctx.Done():
					}
					return nil
				})
		})
		<-inTx
		defer close(release)
		other := s.Queue("other")
		if e.name == "pg" {
			_, err = other.Enqueue(ctx(t), []byte("y"), store.EnqueueOpts{})
			require.NoError(t, err)
			assert.Empty(t, w.all())
			return
		}
		c, cancel := context.WithCancel(ctx(t))
		defer cancel()
		go func() { <-w.first; cancel() }() // the warning came: stop waiting
		_, err = other.Enqueue(c, []byte("y"), store.EnqueueOpts{})
		require.ErrorIs(t, err, context.Canceled, "the write waited for the handler's transaction")
		msgs := w.all()
		require.Len(t, msgs, 1)
		assert.Contains(t, msgs[0], `tx_begun_at=the store, for a WorkTx handler of queue "worktx-held"`)
		assert.NotContains(t, msgs[0], "runtime/")
		assert.NotContains(t, msgs[0], ".s:")
		assert.Contains(t, msgs[0], `op=enqueue`)
		assert.Contains(t, msgs[0], `name=other`)
	})
}
