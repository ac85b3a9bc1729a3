-- The application's own table, beside alkstore's.
CREATE TABLE IF NOT EXISTS sqlc_orders (
    id   INTEGER PRIMARY KEY,
    item TEXT NOT NULL
);
