package sqlstream_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/broker/stream/sqlstream"
	"github.com/picomq/picomq/broker/stream/sqlstream/sqltest"
)

// eachDialect runs f once per dialect, on a fresh database.
func eachDialect(t *testing.T, f func(t *testing.T, db *sqltest.DB)) {
	for _, d := range sqltest.Dialects {
		t.Run(string(d), func(t *testing.T) { f(t, sqltest.Open(t, d)) })
	}
}

func open(t testing.TB, db *sqltest.DB, table string, p stream.PolicyValue) *sqlstream.Stream {
	t.Helper()
	s, err := sqlstream.New(t.Context(), sqlstream.Options{DB: db.DB, Table: db.Table(table), Policy: p})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func wantCoded(t *testing.T, err error, static *errs.Error, kv ...any) {
	t.Helper()
	if !errors.Is(err, static) {
		t.Fatalf("error = %v, want %s", err, static.Name())
	}
	for i := 0; i+1 < len(kv); i += 2 {
		got, ok := errs.FieldOf(err, kv[i].(string))
		if !ok || fmt.Sprint(got) != fmt.Sprint(kv[i+1]) {
			t.Errorf("%s field %q = %v (set %v), want %v; error: %v", static.Name(), kv[i], got, ok, kv[i+1], err)
		}
	}
}

func rec(key, payload string) stream.RecordValue {
	r := stream.RecordValue{}
	if key != "" {
		r.Key = []byte(key)
	}
	if payload != "" {
		r.Payload = []byte(payload)
	}
	return r
}

// otherDriver is a database/sql driver the engine does not know. Nothing is
// ever run on it: the refusals come first.
type otherDriver struct{}

func (otherDriver) Open(string) (driver.Conn, error) { return nil, errors.New("not a database") }

type otherConnector struct{}

func (otherConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("not a database")
}
func (otherConnector) Driver() driver.Driver { return otherDriver{} }

// transactorOf is a Transactor over db that finds nothing.
type transactorOf struct{ db *sql.DB }

func (t transactorOf) DB() *sql.DB                  { return t.db }
func (transactorOf) Tx(context.Context) *sql.Tx     { return nil }
func (transactorOf) String() string                 { return "transactorOf" }
func (t transactorOf) with(db *sql.DB) transactorOf { t.db = db; return t }

func TestRefusedByField(t *testing.T) {
	t.Parallel()
	lite := sqltest.SQLite(t)
	other := sqltest.SQLite(t)
	unknown := sql.OpenDB(otherConnector{})
	defer unknown.Close()
	long := strings.Repeat("t", 41)
	for _, c := range []struct {
		name  string
		o     sqlstream.Options
		field string
	}{
		{"no DB nor transactor", sqlstream.Options{Table: "s"}, "DB"},
		{"transactor with no DB", sqlstream.Options{Transactor: transactorOf{}, Table: "s"}, "Transactor"},
		{"transactor of another DB", sqlstream.Options{DB: lite.DB, Transactor: transactorOf{}.with(other.DB), Table: "s"}, "Transactor"},
		{"dialect it cannot spell", sqlstream.Options{DB: lite.DB, Dialect: "mysql", Table: "s"}, "Dialect"},
		{"dialect of another driver", sqlstream.Options{DB: lite.DB, Dialect: sqlstream.Postgres, Table: "s"}, "Dialect"},
		{"unknown driver, no dialect", sqlstream.Options{DB: unknown, Table: "s"}, "Dialect"},
		{"no table", sqlstream.Options{DB: lite.DB}, "Table"},
		{"injection", sqlstream.Options{DB: lite.DB, Table: `s; DROP TABLE x`}, "Table"},
		{"quote", sqlstream.Options{DB: lite.DB, Table: `s"x`}, "Table"},
		{"leading digit", sqlstream.Options{DB: lite.DB, Table: "1s"}, "Table"},
		{"three parts", sqlstream.Options{DB: lite.DB, Table: "a.b.c"}, "Table"},
		{"bad schema", sqlstream.Options{DB: lite.DB, Table: "a-b.c"}, "Table"},
		{"too long", sqlstream.Options{DB: lite.DB, Table: long}, "Table"},
		{"SQLite's reserved prefix", sqlstream.Options{DB: lite.DB, Table: "sqlite_stream"}, "Table"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := sqlstream.New(t.Context(), c.o)
			if s != nil {
				t.Fatal("New returned a stream")
			}
			wantCoded(t, err, stream.SQLStreamMisconfigured, "field", c.field)
			if e, _ := errs.As(err); e.ExitCode() != 78 || errs.HTTPStatus(err) != 400 {
				t.Errorf("exit %d, status %d; want 78 and 400", e.ExitCode(), errs.HTTPStatus(err))
			}
		})
	}
	// A known driver with its dialect spelled out, and an unknown driver
	// with one, are accepted as far as the configuration goes.
	if _, err := sqlstream.New(t.Context(), sqlstream.Options{DB: lite.DB, Dialect: sqlstream.SQLite, Table: "ok"}); err != nil {
		t.Fatalf("New with the driver's own dialect: %v", err)
	}
	_, err := sqlstream.New(t.Context(), sqlstream.Options{DB: unknown, Dialect: sqlstream.Postgres, Table: "ok"})
	wantCoded(t, err, stream.StreamBackendFailed, "operation", "New")
	// The policy is refused first, as every engine refuses it.
	_, err = sqlstream.New(t.Context(), sqlstream.Options{Policy: stream.PolicyValue{Partitions: -1}})
	wantCoded(t, err, stream.StreamMisconfigured, "field", "Partitions")
	// Nothing was created for a refused table name.
	var n int
	if err := lite.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND (name LIKE '%DROP%' OR name LIKE 's%')`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d tables after the refusals (%v)", n, err)
	}
}

func TestPartitionsStoredWithTables(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *sqltest.DB) {
		open(t, db, "s", stream.PolicyValue{Partitions: 3})
		_, err := sqlstream.New(t.Context(), sqlstream.Options{DB: db.DB, Table: db.Table("s"), Policy: stream.PolicyValue{Partitions: 4}})
		wantCoded(t, err, stream.StreamMisconfigured, "field", "Partitions", "value", 4, "stored", 3)
		if s := open(t, db, "s", stream.PolicyValue{Partitions: 3}); s.Partitions() != 3 {
			t.Fatalf("Partitions() = %d", s.Partitions())
		}
	})
}

// TestTableNamesQuoted opens streams whose names are reserved words:
// quoted, they are tables like any other, and distinct. On PostgreSQL a
// quoted name keeps its case; SQLite compares names case-insensitively,
// quoted or not.
func TestTableNamesQuoted(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *sqltest.DB) {
		names := []string{"order", "select"}
		if db.Dialect == sqlstream.Postgres {
			names = append(names, "Order")
		}
		for i, name := range names {
			s := open(t, db, name, stream.PolicyValue{})
			for range i + 1 {
				if _, err := s.Append(t.Context(), []stream.RecordValue{rec("", name)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i, name := range names {
			s := open(t, db, name, stream.PolicyValue{})
			es, err := s.Read(t.Context(), 0, 0, 10)
			if err != nil || len(es) != i+1 || string(es[0].Record.Payload) != name {
				t.Fatalf("table %q holds %d records (%v), want %d of its own", name, len(es), err, i+1)
			}
		}
	})
}

// TestOutbox is the transactional outbox: a business write and an Append in
// one transaction commit together, or neither does.
func TestOutbox(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *sqltest.DB) {
		ctx := t.Context()
		s := open(t, db, "outbox", stream.PolicyValue{})
		orders := db.Table("orders")
		if _, err := db.ExecContext(ctx, `CREATE TABLE `+orders+` (id text PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		place := func(id string, fail bool) error {
			return sqlstream.InTx(ctx, db.DB, nil, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, `INSERT INTO `+orders+` (id) VALUES ($1)`, id); err != nil {
					return err
				}
				if _, err := s.Append(ctx, []stream.RecordValue{rec(id, "placed")}); err != nil {
					return err
				}
				if fail {
					return errors.New("payment refused")
				}
				return nil
			})
		}
		if err := place("o1", false); err != nil {
			t.Fatal(err)
		}
		if err := place("o2", true); err == nil || !strings.Contains(err.Error(), "payment refused") {
			t.Fatalf("place(o2) = %v", err)
		}
		if err := place("o3", false); err != nil {
			t.Fatal(err)
		}
		var ids []string
		rows, err := db.QueryContext(ctx, `SELECT id FROM `+orders+` ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			_ = rows.Scan(&id)
			ids = append(ids, id)
		}
		rows.Close()
		es, err := s.Read(ctx, 0, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for i, e := range es {
			keys = append(keys, string(e.Record.Key))
			if e.Offset != stream.Offset(i) {
				t.Fatalf("offsets %v: the rolled-back batch left a gap", es)
			}
		}
		if fmt.Sprint(ids) != "[o1 o3]" || fmt.Sprint(keys) != "[o1 o3]" {
			t.Fatalf("orders %v, records %v; want both [o1 o3]", ids, keys)
		}
	})
}

// TestJoinedBatchInvisibleUntilCommit checks that a batch appended in a
// transaction is read by nobody else, nor counted, until it commits, and
// that the caller's own transaction reads it.
func TestJoinedBatchInvisibleUntilCommit(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *sqltest.DB) {
		ctx := t.Context()
		s := open(t, db, "s", stream.PolicyValue{})
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		txCtx := sqlstream.WithTx(ctx, db.DB, tx)
		wake := s.Wake()
		v, err := s.Append(txCtx, []stream.RecordValue{rec("", "a"), rec("", "b")})
		if err != nil || v.First != 0 || v.Last != 1 {
			t.Fatalf("Append in the transaction = %+v, %v", v, err)
		}
		select {
		case <-wake: // a hint: the caller commits out of the engine's sight
		case <-time.After(5 * time.Second):
			t.Fatal("a joined Append woke nobody")
		}
		if es, err := s.Read(txCtx, 0, 0, 10); err != nil || len(es) != 2 {
			t.Fatalf("the transaction reads %d of its records, %v", len(es), err)
		}
		// Another connection reads the last commit (SQLite's WAL readers
		// too, while the transaction holds the write lock).
		if es, err := s.Read(ctx, 0, 0, 10); err != nil || len(es) != 0 {
			t.Fatalf("another reader reads %d uncommitted records, %v", len(es), err)
		}
		if b, err := s.Bounds(ctx, 0); err != nil || b.Next != 0 {
			t.Fatalf("another reader's Bounds = %+v, %v", b, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if es, err := s.Read(ctx, 0, 0, 10); err != nil || len(es) != 2 {
			t.Fatalf("after the commit: %d records, %v", len(es), err)
		}
	})
}

// TestRolledBackOffsetsReused checks that a rolled-back batch takes no
// offset: the next one takes the same, so offsets stay gap-free.
func TestRolledBackOffsetsReused(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *sqltest.DB) {
		ctx := t.Context()
		s := open(t, db, "s", stream.PolicyValue{})
		if _, err := s.Append(ctx, []stream.RecordValue{rec("", "0")}); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("rolled back")
		err := s.InTx(ctx, func(ctx context.Context) error {
			if v, err := s.Append(ctx, []stream.RecordValue{rec("", "x"), rec("", "y")}); err != nil || v.First != 1 {
				t.Errorf("Append = %+v, %v", v, err)
			}
			if err := s.Commit(ctx, "g", 0, 3); err != nil {
				t.Errorf("Commit in the transaction: %v", err)
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("InTx = %v", err)
		}
		if _, err := s.Committed(ctx, "g", 0); !errors.Is(err, stream.UnknownGroup) {
			t.Fatalf("the rolled-back commit is visible: %v", err)
		}
		v, err := s.Append(ctx, []stream.RecordValue{rec("", "1")})
		if err != nil || v.First != 1 {
			t.Fatalf("Append after the rollback = %+v, %v; want offset 1", v, err)
		}
	})
}

// TestInTxWakesAfterCommit checks that readers woken by an Append inside
// InTx are woken by the commit, when there is something to read.
func TestInTxWakesAfterCommit(t *testing.T) {
	t.Parallel()
	db := sqltest.SQLite(t)
	ctx := t.Context()
	s := open(t, db, "s", stream.PolicyValue{})
	wake := s.Wake()
	err := s.InTx(ctx, func(ctx context.Context) error {
		if _, err := s.Append(ctx, []stream.RecordValue{rec("", "a")}); err != nil {
			return err
		}
		select {
		case <-wake:
			return errors.New("woken before the commit")
		default:
			return nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	default:
		t.Fatal("not woken by the commit")
	}
}

// TestRefusalInTransactionKeepsIt checks that a refusal inside a joined
// transaction writes nothing and leaves the caller's transaction usable.
func TestRefusalInTransactionKeepsIt(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *sqltest.DB) {
		ctx := t.Context()
		s := open(t, db, "s", stream.PolicyValue{MaxRecordBytes: 8, MaxBytes: 8})
		err := s.InTx(ctx, func(ctx context.Context) error {
			if _, err := s.Append(ctx, []stream.RecordValue{rec("", "12345")}); err != nil {
				return err
			}
			_, err := s.Append(ctx, []stream.RecordValue{rec("", "6789")})
			wantCoded(t, err, stream.StreamFull, "held", 5, "batch", 4, "max", 8)
			_, err = s.Append(ctx, []stream.RecordValue{rec("", "678")})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if b, err := s.Bounds(ctx, 0); err != nil || b.Next != 2 {
			t.Fatalf("Bounds = %+v, %v; want the two admitted records", b, err)
		}
	})
}

// TestBackendFailureNamesOperation drops the tables under an open stream:
// every operation then fails with STREAM_BACKEND_FAILED naming itself.
func TestBackendFailureNamesOperation(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *sqltest.DB) {
		ctx := t.Context()
		s := open(t, db, "s", stream.PolicyValue{CompactAfter: time.Hour})
		for _, suffix := range []string{"", "_partitions", "_groups", "_meta"} {
			name := db.Table("s" + suffix)
			if db.Schema != "" {
				name = `"` + db.Schema + `"."s` + suffix + `"`
			}
			if _, err := db.ExecContext(ctx, `DROP TABLE `+name); err != nil {
				t.Fatal(err)
			}
		}
		check := func(op string, err error) {
			t.Helper()
			wantCoded(t, err, stream.StreamBackendFailed, "operation", op, "table", db.Table("s"))
			if errs.ExitCode(err) != 74 || errs.HTTPStatus(err) != 500 {
				t.Errorf("%s: exit %d status %d", op, errs.ExitCode(err), errs.HTTPStatus(err))
			}
			if _, ok := errs.FieldOf(err, "step"); !ok {
				t.Errorf("%s: no step: %v", op, err)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Errorf("%s: the error carries the payload: %v", op, err)
			}
		}
		_, err := s.Append(ctx, []stream.RecordValue{rec("", "SECRET")})
		check("Append", err)
		_, err = s.Read(ctx, 0, 0, 1)
		check("Read", err)
		_, err = s.Bounds(ctx, 0)
		check("Bounds", err)
		_, err = s.OffsetAt(ctx, 0, time.Now())
		check("OffsetAt", err)
		check("Trim", s.Trim(ctx, 0, 0))
		_, err = s.Compact(ctx, 0)
		check("Compact", err)
		check("Commit", s.Commit(ctx, "g", 0, 0))
		_, err = s.Committed(ctx, "g", 0)
		check("Committed", err)
	})
}

// TestContextCause checks that a ctx ended during a call ends it with its
// cause, not with a backend failure.
func TestContextCause(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *sqltest.DB) {
		s := open(t, db, "s", stream.PolicyValue{})
		cause := errors.New("shutting down")
		ctx, cancel := context.WithCancelCause(t.Context())
		cancel(cause)
		if _, err := s.Append(ctx, []stream.RecordValue{rec("", "x")}); !errors.Is(err, cause) {
			t.Fatalf("Append = %v", err)
		}
		if _, err := s.Read(ctx, 0, 0, 1); !errors.Is(err, cause) {
			t.Fatalf("Read = %v", err)
		}
	})
}

// TestTwoValuesOneTable appends through two stream values, as two
// processes would, each with a pool of its own: offsets stay gap-free.
func TestTwoValuesOneTable(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *sqltest.DB) {
		ctx := t.Context()
		a := open(t, db, "s", stream.PolicyValue{Partitions: 2})
		b := open(t, db, "s", stream.PolicyValue{Partitions: 2})
		var wg sync.WaitGroup
		errc := make(chan error, 4)
		for i, s := range []*sqlstream.Stream{a, b, a, b} {
			wg.Go(func() {
				for j := range 25 {
					if _, err := s.Append(ctx, []stream.RecordValue{rec(fmt.Sprint(j%3), fmt.Sprintf("%d-%d", i, j))}); err != nil {
						errc <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
		total := 0
		for p := range 2 {
			es, err := a.Read(ctx, p, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range es {
				if e.Offset != stream.Offset(i) {
					t.Fatalf("partition %d offsets not gap-free at %d: %d", p, i, e.Offset)
				}
			}
			total += len(es)
		}
		if total != 100 {
			t.Fatalf("%d records, want 100", total)
		}
	})
}

// TestSQLiteBareDSN opens SQLite as a caller may, with none of
// OpenSQLite's settings — rollback journal, no busy_timeout — and appends
// and reads from several goroutines: the engine waits out the busy
// database rather than failing.
func TestSQLiteBareDSN(t *testing.T) {
	t.Parallel()
	raw, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "bare.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx := t.Context()
	s, err := sqlstream.New(ctx, sqlstream.Options{DB: raw, Table: "s", Policy: stream.PolicyValue{Partitions: 2}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for w := range 4 {
		wg.Go(func() {
			for i := range 20 {
				if _, err := s.Append(ctx, []stream.RecordValue{rec(fmt.Sprint(i%4), fmt.Sprintf("%d-%d", w, i))}); err != nil {
					errc <- fmt.Errorf("Append: %w", err)
					return
				}
			}
		})
		wg.Go(func() {
			for i := range 20 {
				if _, err := s.Read(ctx, i%2, 0, 100); err != nil {
					errc <- fmt.Errorf("Read: %w", err)
					return
				}
				if err := s.Commit(ctx, fmt.Sprint("g", w), i%2, 0); err != nil {
					errc <- fmt.Errorf("Commit: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	var total stream.Offset
	for p := range 2 {
		b, err := s.Bounds(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		total += b.Next
	}
	if total != 80 {
		t.Fatalf("%d records, want 80", total)
	}
}
