-- name: CreateOrder :one
INSERT INTO sqlc_orders (item) VALUES (sqlc.arg(item)) RETURNING id;

-- name: CountOrders :one
SELECT count(*) FROM sqlc_orders;
