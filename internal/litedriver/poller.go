package litedriver

import (
	"context"
	"database/sql"
	"errors"

	"github.com/ncruces/go-sqlite3"
)

// Poller steps one prepared query that returns a single integer (SQLite's
// change watcher: PRAGMA data_version) on a connection of its own, without
// database/sql's work per call: for a cancellable context it starts a
// goroutine per query, and its argument and row plumbing costs more than
// the pragma. An idle store polls several dozen times a second, and each
// poll is a wake of an otherwise parked process.
type Poller struct {
	conn *sql.Conn
	stmt *sqlite3.Stmt
}

// NewPoller takes a connection of db for good and prepares query on it.
func NewPoller(ctx context.Context, db *sql.DB, query string) (*Poller, error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	p := &Poller{conn: c}
	err = c.Raw(func(dc any) (err error) {
		cn := dc.(*conn)
		defer guard(cn.broken, &err)
		p.stmt, _, err = cn.raw.Raw().Prepare(query)
		return err
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	return p, nil
}

// Int64 steps the query once and returns its first column.
func (p *Poller) Int64() (v int64, err error) {
	err = p.conn.Raw(func(dc any) (err error) {
		defer guard(dc.(*conn).broken, &err)
		if !p.stmt.Step() {
			if err = p.stmt.Err(); err == nil {
				err = errors.New("no row")
			}
			p.stmt.Reset()
			return err
		}
		v = p.stmt.ColumnInt64(0)
		return p.stmt.Reset()
	})
	return v, err
}

// Close finalizes the statement and gives the connection back.
func (p *Poller) Close() error {
	err := p.conn.Raw(func(dc any) (err error) {
		defer guard(dc.(*conn).broken, &err)
		return p.stmt.Close()
	})
	return errors.Join(err, p.conn.Close())
}

// WAL is the path of the database's write-ahead log (the file may not
// exist while no connection has the database open in WAL mode).
func (p *Poller) WAL() (path string) {
	_ = p.conn.Raw(func(dc any) error {
		if f := dc.(*conn).raw.Raw().Filename("main"); f != nil {
			path = f.WAL()
		}
		return nil
	})
	return path
}
