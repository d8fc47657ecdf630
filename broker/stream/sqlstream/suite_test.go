package sqlstream_test

import (
	"testing"

	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/broker/stream/sqlstream"
	"github.com/picomq/picomq/broker/stream/sqlstream/sqltest"
	"github.com/picomq/picomq/broker/stream/streamtest"
)

// factory is the engine suite's Factory for dialect: a fresh table in a
// fresh database (SQLite) or schema (PostgreSQL), and a Reopen that opens
// the same table again as another process would.
func factory(dialect sqlstream.Dialect) streamtest.Factory {
	return func(t *testing.T, p stream.PolicyValue, clock streamtest.Clock) (streamtest.Engine, error) {
		db := sqltest.Open(t, dialect)
		open := func() (*sqlstream.Stream, error) {
			return sqlstream.New(t.Context(), sqlstream.Options{DB: db.DB, Table: db.Table("stream"), Policy: p, Now: clock.Now})
		}
		s, err := open()
		if err != nil {
			return streamtest.Engine{}, err
		}
		return streamtest.Engine{
			Stream: s,
			Reopen: func(t *testing.T) stream.Stream {
				next, err := open()
				if err != nil {
					t.Fatalf("reopen: %v", err)
				}
				return next
			},
		}, nil
	}
}

// TestSuite runs the engine suite — everything package stream promises —
// on SQLite and on PostgreSQL.
func TestSuite(t *testing.T) {
	for _, d := range sqltest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			if d == sqlstream.Postgres {
				sqltest.PostgresURL(t)
			}
			streamtest.Run(t, factory(d))
		})
	}
}
