package store

import (
	"context"
	"database/sql"
	"log/slog"
	"time"

	litedb "github.com/alkstore/alkstore/db/lite"
	"github.com/alkstore/alkstore/internal/wake"
	"github.com/alkstore/alkstore/queries"
)

// Wakes and notifications on SQLite.

// How often the watcher looks for other processes' commits: every
// millisecond while they flow, backing off to every 16 ms once the file has
// been quiet for a while. Each poll is a few µs of work but wakes an idle
// process: at the former 4 ms, 250 wakes a second cost an idle store with
// 20 receivers and a worker about 1.5% of a core on its own. A commit
// after a quiet spell is seen within 16 ms (8 on average); every later one
// of a flow within a millisecond.
const (
	watchFastest = time.Millisecond
	watchSlowest = 16 * time.Millisecond
)

// startFeed runs the watcher on a connection of its own: data_version only
// changes for commits by other connections, and it must be the same
// connection every time.
func (e *liteEngine) startFeed(hub *wake.Hub, log *slog.Logger) (func(), <-chan struct{}) {
	ready := make(chan struct{})
	close(ready) // in-process wakes need no set-up
	var stmt *sql.Stmt
	conn, err := e.watch.Conn(context.Background())
	if err == nil {
		// Prepared once: at a thousand polls a second, parsing would be most
		// of the watcher's cost.
		if stmt, err = conn.PrepareContext(context.Background(), queries.DataVersion); err != nil {
			conn.Close()
		}
	}
	if err != nil {
		log.Error("alkstore: cannot watch the SQLite file for other processes' commits", "error", err)
		hub.Close(err)
		return func() {}, ready
	}
	version := func(ctx context.Context) (v int64, err error) {
		err = stmt.QueryRowContext(ctx).Scan(&v)
		return v, err
	}
	w := wake.StartWatcher(hub, version, watchFastest, watchSlowest)
	return func() { w.Close(); stmt.Close(); conn.Close() }, ready
}

// committed needs nothing on SQLite: other processes' watchers see every
// commit.
func (e *liteEngine) committed(string) {}

func (e *liteEngine) listen(ctx context.Context, s *Store, channel string, onClose func()) (*Listener, error) {
	return newPollListener(ctx, channel, liteMessages{q: e.readQ, channel: channel},
		s.subscribe(channelTopic(channel)), ListenBuffer, onClose)
}

// notificationPage is NotificationsSince's LIMIT: a full page means more
// rows may follow.
const notificationPage = 1000

// liteMessages reads one channel's rows of the notifications table.
type liteMessages struct {
	q       *litedb.Queries
	channel string
}

func (m liteMessages) Latest(ctx context.Context) (int64, error) { return m.q.LatestNotification(ctx) }

func (m liteMessages) Since(ctx context.Context, after int64) ([]int64, [][]byte, error) {
	rows, err := m.q.NotificationsSince(ctx, litedb.NotificationsSinceParams{Channel: m.channel, After: after})
	ids, payloads := make([]int64, len(rows)), make([][]byte, len(rows))
	for i, r := range rows {
		ids[i], payloads[i] = r.ID, r.Payload
	}
	return ids, payloads, err
}

func (o liteOps) notify(ctx context.Context, channel string, payload []byte, now time.Time) error {
	_, err := o.q.Notify(ctx, litedb.NotifyParams{Channel: channel, Payload: payload, Now: now.UnixMicro()})
	return err
}

func (o liteOps) pruneNotifications(ctx context.Context, cutoff time.Time, keep int) (int64, error) {
	latest, err := o.q.LatestNotification(ctx)
	if err != nil {
		return 0, err
	}
	return o.q.PruneNotifications(ctx, litedb.PruneNotificationsParams{Cutoff: cutoff.UnixMicro(), MaxID: latest - int64(keep)})
}
