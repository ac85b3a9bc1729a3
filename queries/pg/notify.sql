-- Wakes and notifications (PostgreSQL). Every wake and notification travels
-- on the one channel "alkstore"; the payload says what it is (see
-- internal/wake/wire.go), so no statement builds a channel name at run time.

-- name: ListenWakes :exec
-- Run by the store's forwarder on its dedicated connection.
LISTEN alkstore;

-- name: Notify :exec
-- Delivered when the surrounding transaction commits; dropped on rollback.
SELECT pg_notify('alkstore', @payload::text);
