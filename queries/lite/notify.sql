-- Wakes and notifications (SQLite). A notification is a row that listeners
-- read after a wake; the janitor prunes old rows.

-- name: DataVersion :one
-- Changes whenever another connection commits to the file: the watcher
-- polls it on a connection of its own.
PRAGMA data_version;

-- name: Notify :one
INSERT INTO alk_notifications (channel, payload, created_at)
VALUES (@channel, @payload, @now)
RETURNING id;

-- name: LatestNotification :one
SELECT CAST(COALESCE(max(id), 0) AS INTEGER) AS id FROM alk_notifications;

-- name: NotificationsSince :many
SELECT id, payload FROM alk_notifications
WHERE channel = @channel AND id > @after
ORDER BY id
LIMIT 1000;

-- name: PruneNotifications :execrows
-- Deletes notifications created before the cutoff or with an id at or
-- below max_id (the caller keeps the newest N by passing latest - N).
DELETE FROM alk_notifications
WHERE created_at < @cutoff OR id <= @max_id;
