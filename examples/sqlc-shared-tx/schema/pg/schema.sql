-- The application's own table, beside alkstore's.
CREATE TABLE IF NOT EXISTS sqlc_orders (
    id   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    item TEXT NOT NULL
);
