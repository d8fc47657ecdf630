package sqlstream

import (
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	_ "modernc.org/sqlite"             // registers "sqlite"
)

// OpenSQLite opens, creating it when missing, the SQLite database file path
// with the settings the engine is meant to run under:
//
//   - journal_mode WAL: readers never block the writer, nor the writer them;
//   - synchronous FULL: a committed Append is on the device, as the
//     stream.Stream contract asks of a durable engine;
//   - busy_timeout 10 s: a writer waits for another process's lock rather
//     than failing at once;
//   - _txlock immediate: the transactions database/sql begins (InTx's) take
//     the write lock at BEGIN, so a transaction that reads before it appends
//     cannot find its snapshot gone stale under a concurrent writer.
//
// path may not contain '?' or '#'.
func OpenSQLite(path string) (*sql.DB, error) {
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlstream: SQLite path %q contains '?' or '#'", path)
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Set("_txlock", "immediate")
	return sql.Open("sqlite", "file:"+path+"?"+q.Encode())
}

// OpenPostgres opens the PostgreSQL database at url (a postgres:// URL or a
// key=value connection string) through pgx's database/sql driver. A caller
// holding a pgxpool.Pool passes stdlib.OpenDBFromPool(pool) to New instead.
func OpenPostgres(url string) (*sql.DB, error) {
	return sql.Open("pgx", url)
}
