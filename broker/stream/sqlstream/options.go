package sqlstream

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"modernc.org/sqlite"

	"github.com/picomq/picomq/broker/stream"
)

// Dialect is the SQL spoken by the engine's database.
type Dialect string

const (
	// Postgres is PostgreSQL, through pgx's database/sql driver
	// (github.com/jackc/pgx/v5/stdlib) or any driver that speaks it.
	Postgres Dialect = "postgres"
	// SQLite is SQLite 3.35 or later, through modernc.org/sqlite (pure Go)
	// or any driver that speaks it: the embedded default.
	SQLite Dialect = "sqlite"
)

// Options configure New.
type Options struct {
	// DB is the database whose tables keep the stream. It may be left nil
	// when Transactor is set: the Transactor's DB is used.
	DB *sql.DB
	// Transactor finds the caller's transaction in a ctx, for Append and
	// Commit to join. Nil means NewTransactor(DB), which finds what WithTx and
	// InTx put there. When both are set they must name the same database:
	// the engine could not join a transaction of another one.
	Transactor Transactor
	// Dialect is DB's SQL. Empty means the one of DB's driver, when it is
	// pgx's or modernc.org/sqlite's; a driver the engine does not know needs
	// it spelled out.
	Dialect Dialect
	// Table names the stream's records table, created when missing, along
	// with Table_partitions (bounds, bytes), Table_groups (Committer) and
	// Table_meta (the partition count). It is an identifier of letters,
	// digits and underscores, at most 40 long, optionally qualified by a
	// schema ("shop.orders_outbox"); it is always quoted, never interpolated
	// raw, so it keeps its case.
	Table string
	// Policy is the stream's policy, validated before the database is
	// touched. Partitions is stored with the tables and fixed for their life:
	// opening them with another count is refused. Every other field is the
	// opener's: every process opening one table should pass the same.
	Policy stream.PolicyValue
	// Now dates every batch and measures every age (default time.Now).
	// Waits run on the runtime's timers.
	Now func() time.Time
}

// maxTableLen leaves room, under PostgreSQL's 63-byte identifiers, for the
// suffixes of the tables and of the indexes PostgreSQL names after them
// ("_partitions_pkey").
const maxTableLen = 40

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// misconfigured is SQL_STREAM_MISCONFIGURED for field.
func misconfigured(field string, value any, reason string) error {
	return stream.SQLStreamMisconfigured.With("field", field, "value", value, "reason", reason)
}

// resolve checks o's SQL settings, in the order DB, Transactor, Dialect,
// Table, and returns the database, the transactor, the dialect and the
// quoted table names.
func (o Options) resolve() (*sql.DB, Transactor, Dialect, names, error) {
	db, tr := o.DB, o.Transactor
	switch {
	case db == nil && tr == nil:
		return nil, nil, "", names{}, misconfigured("DB", nil, "no database and no transactor")
	case tr == nil:
		tr = NewTransactor(db)
	case tr.DB() == nil:
		return nil, nil, "", names{}, misconfigured("Transactor", fmt.Sprintf("%T", tr), "the transactor names no database")
	case db == nil:
		db = tr.DB()
	case tr.DB() != db:
		return nil, nil, "", names{}, misconfigured("Transactor", fmt.Sprintf("%T", tr),
			"the transactor's transactions are of another database than DB: the engine cannot join them")
	}
	dialect, err := resolveDialect(o.Dialect, db)
	if err != nil {
		return nil, nil, "", names{}, err
	}
	n, err := tableNames(o.Table, dialect)
	if err != nil {
		return nil, nil, "", names{}, err
	}
	return db, tr, dialect, n, nil
}

func resolveDialect(d Dialect, db *sql.DB) (Dialect, error) {
	var driverDialect Dialect
	switch db.Driver().(type) {
	case *stdlib.Driver:
		driverDialect = Postgres
	case *sqlite.Driver:
		driverDialect = SQLite
	}
	switch {
	case d == "" && driverDialect == "":
		return "", misconfigured("Dialect", "", fmt.Sprintf("driver %T is not one the engine knows: name the dialect", db.Driver()))
	case d == "":
		return driverDialect, nil
	case d != Postgres && d != SQLite:
		return "", misconfigured("Dialect", string(d), `the engine spells "postgres" and "sqlite"`)
	case driverDialect != "" && d != driverDialect:
		return "", misconfigured("Dialect", string(d), fmt.Sprintf("the database's driver %T speaks %s", db.Driver(), driverDialect))
	}
	return d, nil
}

// names are the quoted, schema-qualified names of a stream's tables.
type names struct {
	table                        string // as configured
	records, parts, groups, meta string
}

func tableNames(table string, d Dialect) (names, error) {
	refuse := func(reason string) (names, error) { return names{}, misconfigured("Table", table, reason) }
	if table == "" {
		return refuse("no table name")
	}
	schema, name, qualified := strings.Cut(table, ".")
	if !qualified {
		schema, name = "", table
	}
	if qualified && !identifier.MatchString(schema) {
		return refuse("the schema is not an identifier of letters, digits and underscores")
	}
	if len(schema) > 63 {
		return refuse("the schema is longer than 63 bytes")
	}
	if !identifier.MatchString(name) {
		return refuse("not an identifier of letters, digits and underscores, optionally schema-qualified")
	}
	if len(name) > maxTableLen {
		return refuse(fmt.Sprintf("longer than %d bytes", maxTableLen))
	}
	if d == SQLite && strings.HasPrefix(strings.ToLower(name), "sqlite_") {
		return refuse("SQLite reserves names beginning with sqlite_")
	}
	quote := func(n string) string {
		if qualified {
			return `"` + schema + `"."` + n + `"`
		}
		return `"` + n + `"`
	}
	return names{
		table:   table,
		records: quote(name),
		parts:   quote(name + "_partitions"),
		groups:  quote(name + "_groups"),
		meta:    quote(name + "_meta"),
	}, nil
}

// New opens the stream kept in o.Table of o.DB, creating its tables when
// they are missing. It refuses a policy as stream.PolicyValue.Validate does
// (STREAM_MISCONFIGURED), then an SQL setting by field
// (SQL_STREAM_MISCONFIGURED: DB, Transactor, Dialect, Table), before it
// touches the database; tables created with another partition count are
// STREAM_MISCONFIGURED ("field" Partitions, "stored"), and a statement the
// database refuses is STREAM_BACKEND_FAILED.
//
// The Stream implements stream.Stream and stream.Waker, Seeker, Trimmer,
// Compactor and Committer.
func New(ctx context.Context, o Options) (*Stream, error) {
	if err := o.Policy.Validate(); err != nil {
		return nil, err
	}
	db, tr, dialect, n, err := o.resolve()
	if err != nil {
		return nil, err
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	s := &Stream{
		db:      db,
		tr:      tr,
		dialect: dialect,
		names:   n,
		policy:  o.Policy.Normalized(),
		now:     now,
	}
	s.q = buildStatements(dialect, n, s.policy)
	if err := s.migrate(ctx); err != nil {
		return nil, err
	}
	return s, nil
}
