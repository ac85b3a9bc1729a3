-- Inspection (PostgreSQL): read-only statements for alktest, the test
-- helpers, which run them in a transaction of the store (Tx.Pgx).

-- name: EnqueuedJobs :many
-- A queue's jobs, whatever their state, in id (enqueue) order.
SELECT * FROM alkstore.jobs WHERE queue = @queue::text ORDER BY id LIMIT @max_jobs::integer;
