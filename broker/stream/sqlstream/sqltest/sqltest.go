// Package sqltest gives tests the databases the SQL engine runs on: a fresh
// SQLite file, and a fresh schema on the PostgreSQL server named by
// PICOMQ_TEST_POSTGRES_URL — the one hack/postgres.sh starts, and `make test`
// starts around `go test`.
//
// Without that variable the PostgreSQL tests skip, saying how to run them;
// under CI=true or PICOMQ_REQUIRE_POSTGRES=1 (.ci/run sets it) they fail
// instead, so that a CI run that lost its server cannot pass by skipping
// them. Under -short (the unit tier, `make test-unit`) they always skip:
// that tier runs what needs no server.
package sqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/stream/sqlstream"
)

const (
	// EnvPostgresURL names the variable holding the test server's URL.
	EnvPostgresURL = "PICOMQ_TEST_POSTGRES_URL"
	// EnvRequirePostgres, set to 1, makes a missing server a failure, as
	// CI=true does.
	EnvRequirePostgres = "PICOMQ_REQUIRE_POSTGRES"
)

// SkipShort is the message a PostgreSQL test skips with under -short.
const SkipShort = "PostgreSQL tier: skipped under -short; `make test` (or go test without -short, with " + EnvPostgresURL + " set) runs it"

// PostgresURL returns the test server's URL. It skips t under -short, and
// when none is set; it fails t when none is set under CI=true or
// PICOMQ_REQUIRE_POSTGRES=1.
func PostgresURL(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip(SkipShort)
	}
	url := os.Getenv(EnvPostgresURL)
	if url == "" {
		msg := EnvPostgresURL + " is not set: run `make test`, or eval \"$(hack/postgres.sh start)\" first"
		if os.Getenv("CI") == "true" || os.Getenv(EnvRequirePostgres) == "1" {
			t.Fatal(msg + " (CI=true or " + EnvRequirePostgres + "=1: the PostgreSQL tests must run)")
		}
		t.Skip(msg)
	}
	return url
}

// DB is a database for one test, with the dialect to name and a place for
// tables no other test uses.
type DB struct {
	*sql.DB
	Dialect sqlstream.Dialect
	// Schema qualifies the test's tables ("" on SQLite, whose file is the
	// test's own).
	Schema string
}

// Table returns name qualified by the test's schema.
func (d *DB) Table(name string) string {
	if d.Schema == "" {
		return name
	}
	return d.Schema + "." + name
}

// Open returns a database of dialect for t: Postgres or SQLite.
func Open(t testing.TB, dialect sqlstream.Dialect) *DB {
	t.Helper()
	switch dialect {
	case sqlstream.Postgres:
		return Postgres(t)
	case sqlstream.SQLite:
		return SQLite(t)
	}
	t.Fatalf("sqltest: no dialect %q", dialect)
	return nil
}

// Dialects lists the dialects tests run on.
var Dialects = []sqlstream.Dialect{sqlstream.SQLite, sqlstream.Postgres}

var seq atomic.Int64

// Postgres returns a pool on the test server and a schema created for t,
// dropped with everything in it when t ends.
func Postgres(t testing.TB) *DB {
	t.Helper()
	url := PostgresURL(t)
	db, err := sqlstream.OpenPostgres(url)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := fmt.Sprintf("t%d_%d_%s", os.Getpid(), seq.Add(1), hex.EncodeToString(b[:]))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA "`+schema+`"`); err != nil {
		_ = db.Close()
		t.Fatalf("PostgreSQL at %s: %v", url, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, `DROP SCHEMA "`+schema+`" CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
		_ = db.Close()
	})
	return &DB{DB: db, Dialect: sqlstream.Postgres, Schema: schema}
}

// SQLite returns a new SQLite database file in t's temporary directory,
// opened as sqlstream.OpenSQLite opens it.
func SQLite(t testing.TB) *DB {
	t.Helper()
	return SQLiteAt(t, filepath.Join(t.TempDir(), fmt.Sprintf("stream%d.db", seq.Add(1))))
}

// SQLiteAt opens the SQLite database file path for t, closed when t ends.
func SQLiteAt(t testing.TB, path string) *DB {
	t.Helper()
	db, err := sqlstream.OpenSQLite(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return &DB{DB: db, Dialect: sqlstream.SQLite}
}
