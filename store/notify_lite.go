package store

import (
	"context"
	"log/slog"
	"time"

	litedb "github.com/alkstore/alkstore/db/lite"
	"github.com/alkstore/alkstore/internal/litedriver"
	"github.com/alkstore/alkstore/internal/wake"
	"github.com/alkstore/alkstore/queries"
)

// Wakes and notifications on SQLite.

// How often the watcher looks for other processes' commits. Where inotify
// works (Linux), a write to the WAL file by any process nudges the watcher:
// it polls at once, then 2, 6 and 14 ms later (the write may not have
// committed yet), doubling the wait from there, so a commit is seen within
// a few milliseconds while an idle store polls only every watchSafety, for a
// write the nudges missed. Elsewhere it polls every millisecond while
// commits flow, backing off to every 16 ms once the file has been quiet for
// 100 ms: each poll costs little work but wakes an idle process (at 16 ms,
// about 1.5% of a core on this bench machine), and a commit after a quiet
// spell is seen within 16 ms.
const (
	watchFastest    = time.Millisecond
	watchSlowest    = 16 * time.Millisecond
	watchQuietAfter = 100 * time.Millisecond
	watchSafety     = 250 * time.Millisecond
)

// startFeed runs the watcher on a connection of its own: data_version only
// changes for commits by other connections, and it must be the same
// connection every time.
func (e *liteEngine) startFeed(hub *wake.Hub, log *slog.Logger) (func(), <-chan struct{}) {
	ready := make(chan struct{})
	close(ready) // in-process wakes need no set-up
	poll, err := litedriver.NewPoller(context.Background(), e.watch, queries.DataVersion)
	if err != nil {
		log.Error("alkstore: cannot watch the SQLite file for other processes' commits", "error", err)
		hub.Close(err)
		return func() {}, ready
	}
	version := func(context.Context) (int64, error) { return poll.Int64() }
	p := wake.Polling{Fastest: watchFastest, Slowest: watchSlowest, QuietAfter: watchQuietAfter}
	stopNudges := func() {}
	if nudge, stop, err := wake.FileWrites(poll.WAL()); err == nil {
		p.Nudge, p.Slowest, p.QuietAfter, stopNudges = nudge, watchSafety, 0, stop
		log.Debug("alkstore: the SQLite change watcher polls when the WAL file is written (inotify)", "wal", poll.WAL())
	} else {
		log.Debug("alkstore: polling the SQLite file for other processes' commits without inotify", "error", err)
	}
	w := wake.StartWatcher(hub, version, p)
	return func() { w.Close(); stopNudges(); poll.Close() }, ready
}

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
	_, err := o.q.Notify(o.queryWrite(ctx), litedb.NotifyParams{Channel: channel, Payload: payload, Now: now.UnixMicro()})
	return err
}

func (o liteOps) pruneNotifications(ctx context.Context, cutoff time.Time, keep int) (int64, error) {
	latest, err := o.q.LatestNotification(ctx)
	if err != nil {
		return 0, err
	}
	return o.q.PruneNotifications(ctx, litedb.PruneNotificationsParams{Cutoff: cutoff.UnixMicro(), MaxID: latest - int64(keep)})
}
