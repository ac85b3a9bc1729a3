-- Inspection (SQLite): read-only statements for alktest, the test helpers,
-- which run them in a transaction of the store (Tx.SQL).

-- name: EnqueuedJobs :many
-- A queue's jobs, whatever their state, in id (enqueue) order.
SELECT * FROM alk_jobs WHERE queue = @queue ORDER BY id LIMIT @max_jobs;
