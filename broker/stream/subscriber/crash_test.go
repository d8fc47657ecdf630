package subscriber_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/embedded"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/broker/stream/sqlstream"
	"github.com/picomq/picomq/broker/stream/subscriber"
	"github.com/picomq/picomq/internal/testwait"
)

// The crash test runs this test binary again as the subscriber's process:
// with envChild set, TestMain runs crashingChild instead of the tests.
const (
	envChild    = "PICOMQ_SUBSCRIBER_CHILD" // the engine's kind
	envDSN      = "PICOMQ_SUBSCRIBER_DSN"
	envTable    = "PICOMQ_SUBSCRIBER_TABLE"
	envBusiness = "PICOMQ_SUBSCRIBER_BUSINESS" // SQL engines: the handler's table
	envEffects  = "PICOMQ_SUBSCRIBER_EFFECTS"  // the file every handled record is appended to
	envCrashAt  = "PICOMQ_SUBSCRIBER_CRASH_AT" // the offset of partition 0 whose commit never happens
	crashCode   = 3
	crashParts  = 2
)

func TestMain(m *testing.M) {
	if kind := os.Getenv(envChild); kind != "" {
		err := crashingChild(kind)
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1) // crashingChild only returns when it failed to crash
	}
	os.Exit(m.Run())
}

// effectsHandler is a handler whose effects are a line "<partition>
// <offset>" appended to a file — outside any transaction, so a record
// handled twice shows twice — and, on the SQL engines, a row of the
// business table written in the transaction the subscriber runs it in.
func effectsHandler(path string, db *sql.DB, business string, dialect sqlstream.Dialect) (subscriber.Handler, func() error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return func(context.Context, stream.EntryValue) error { return err }, func() error { return nil }
	}
	insert := `INSERT INTO ` + business + ` (part, off) VALUES ($1, $2)`
	if dialect == sqlstream.SQLite {
		insert = `INSERT INTO ` + business + ` (part, off) VALUES (?1, ?2)`
	}
	var mu sync.Mutex
	return func(ctx context.Context, e stream.EntryValue) error {
		if business != "" {
			tx := sqlstream.TxFrom(ctx, db)
			if tx == nil {
				return errors.New("the handler runs in no transaction")
			}
			if _, err := tx.ExecContext(ctx, insert, e.Partition, int64(e.Offset)); err != nil {
				return err
			}
		}
		mu.Lock()
		defer mu.Unlock()
		_, err := fmt.Fprintf(f, "%d %d\n", e.Partition, e.Offset)
		return err
	}, f.Close
}

// crashingChild subscribes to the stored stream and exits — a crash, with
// no cleanup — between the handler's success for offset CRASH_AT of
// partition 0 and the commit of its offset.
func crashingChild(kind string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	crashAt, err := strconv.Atoi(os.Getenv(envCrashAt))
	if err != nil {
		return err
	}
	policy := stream.PolicyValue{Partitions: crashParts}
	var (
		s       stream.Stream
		db      *sql.DB
		dialect sqlstream.Dialect
	)
	switch kind {
	case "embedded":
		e, err := embedded.Open(os.Getenv(envDSN), embedded.Options{Policy: policy})
		if err != nil {
			return err
		}
		s = e
	case "remote":
		if s, err = client.Open(ctx, os.Getenv(envDSN), os.Getenv(envTable), policy); err != nil {
			return err
		}
	default:
		open, d := sqlstream.OpenSQLite, sqlstream.SQLite
		if kind == "postgres" {
			open, d = sqlstream.OpenPostgres, sqlstream.Postgres
		}
		if db, err = open(os.Getenv(envDSN)); err != nil {
			return err
		}
		dialect = d
		if s, err = sqlstream.New(ctx, sqlstream.Options{DB: db, Table: os.Getenv(envTable), Policy: policy}); err != nil {
			return err
		}
	}
	h, _ := effectsHandler(os.Getenv(envEffects), db, os.Getenv(envBusiness), dialect)
	o := fast("g", h)
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	sub, err := subscriber.New(s, o)
	if err != nil {
		return err
	}
	subscriber.SetCrashBeforeCommit(sub, func(p int, e stream.EntryValue) error {
		if p == 0 && e.Offset == stream.Offset(crashAt) {
			os.Exit(crashCode)
		}
		return nil
	})
	return fmt.Errorf("Run returned without crashing: %v", sub.Run(ctx))
}

// TestProcessCrashBetweenHandleAndCommit kills the subscriber's process
// between a handler's success and the commit of its offset: the next
// process delivers the record again — at least once, never lost — and on
// the SQL engines, where the handler's writes and the offset commit in one
// transaction, the business table holds every record exactly once.
func TestProcessCrashBetweenHandleAndCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("process tier: skipped under -short (it re-runs the test binary as a subscriber process that crashes); go test without -short runs it")
	}
	eachEngine(t, durable, func(t *testing.T, kind string) {
		const n, crashAt = 6, 3
		st := newStore(t, kind, stream.PolicyValue{Partitions: crashParts})
		s := st.open(t)
		appendN(t, s, n)
		effects := filepath.Join(t.TempDir(), "effects")
		var business string
		if st.db != nil {
			business = st.db.Table("business")
			if _, err := st.db.ExecContext(t.Context(), `CREATE TABLE `+business+` (part integer NOT NULL, off bigint NOT NULL)`); err != nil {
				t.Fatal(err)
			}
		}
		st.close() // the child process opens the embedded directory

		child := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), envChild+"="+kind, envDSN+"="+st.dsn, envTable+"="+st.table,
			envBusiness+"="+business, envEffects+"="+effects, envCrashAt+"="+strconv.Itoa(crashAt))
		out, err := child.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != crashCode {
			t.Fatalf("child = %v, want exit code %d (the crash)\n%s", err, crashCode, out)
		}

		s = st.open(t) // the restarted process
		if got, err := s.(stream.Committer).Committed(t.Context(), "g", 0); err != nil || got != crashAt {
			t.Fatalf("partition 0 committed %d, %v; want %d: the crashed record's offset was not committed", got, err, crashAt)
		}
		var db *sql.DB
		var dialect sqlstream.Dialect
		if st.db != nil {
			db, dialect = st.db.DB, st.db.Dialect
		}
		h, closeEffects := effectsHandler(effects, db, business, dialect)
		sub, err := subscriber.New(s, fast("g", h))
		if err != nil {
			t.Fatal(err)
		}
		r := start(t, sub)
		testwait.Until(t, 20*time.Second, "every record is handled", func() bool {
			st := sub.Status()
			return st.Partitions[0].Next == n && st.Partitions[1].Next == n
		})
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		_ = closeEffects()

		counts := readEffects(t, effects)
		for p := range crashParts {
			for o := range n {
				c := counts[[2]int{p, o}]
				switch {
				case c == 0:
					t.Fatalf("record %d/%d was never handled: lost", p, o)
				case p == 0 && o == crashAt && c != 2:
					t.Fatalf("the crashed record was handled %d times, want twice: redelivered", c)
				case p == 0 && o < crashAt && c != 1:
					t.Fatalf("record 0/%d, committed before the crash, was handled %d times", o, c)
				case c > 2:
					t.Fatalf("record %d/%d was handled %d times", p, o, c)
				}
			}
		}
		if business == "" {
			return
		}
		rows, err := st.db.QueryContext(t.Context(), `SELECT part, off, count(*) FROM `+business+` GROUP BY part, off`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		seen := 0
		for rows.Next() {
			var p, o, c int
			if err := rows.Scan(&p, &o, &c); err != nil {
				t.Fatal(err)
			}
			if c != 1 {
				t.Fatalf("the business table holds record %d/%d %d times: the crashed transaction was not rolled back", p, o, c)
			}
			seen++
		}
		if seen != crashParts*n {
			t.Fatalf("the business table holds %d records, want %d", seen, crashParts*n)
		}
	})
}

func readEffects(t *testing.T, path string) map[[2]int]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	counts := map[[2]int]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var p, o int
		if _, err := fmt.Sscanf(strings.TrimSpace(sc.Text()), "%d %d", &p, &o); err != nil {
			t.Fatalf("effects line %q: %v", sc.Text(), err)
		}
		counts[[2]int{p, o}]++
	}
	return counts
}
