package sqlstream_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/broker/stream/sqlstream"
	"github.com/picomq/picomq/broker/stream/sqlstream/sqltest"
)

// The multi-process test runs this test binary again as the appenders: with
// envChild set, TestMain runs appender instead of the tests.
const (
	envChild = "PICOMQ_SQLSTREAM_APPENDER" // the child's id
	envDSN   = "PICOMQ_SQLSTREAM_DSN"      // a PostgreSQL URL or an SQLite path
	envTable = "PICOMQ_SQLSTREAM_TABLE"
	envStart = "PICOMQ_SQLSTREAM_START" // unix nanoseconds: when to begin, so the children overlap
)

const (
	mpPartitions = 2
	mpBatches    = 150
)

func TestMain(m *testing.M) {
	if id := os.Getenv(envChild); id != "" {
		if err := appender(id); err != nil {
			fmt.Fprintln(os.Stderr, "appender:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// appender opens the table, as a process of its own, and appends mpBatches
// batches of one to three records, keyed and unkeyed, printing where each
// landed: "ack <partition> <first> <last> <payload>,<payload>...".
func appender(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn, table := os.Getenv(envDSN), os.Getenv(envTable)
	open := sqlstream.OpenSQLite
	if strings.HasPrefix(dsn, "postgres") {
		open = sqlstream.OpenPostgres
	}
	db, err := open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if ns, err := strconv.ParseInt(os.Getenv(envStart), 10, 64); err == nil {
		time.Sleep(time.Until(time.Unix(0, ns)))
	}
	// Both processes open the table at once: creating it is serialized too.
	s, err := sqlstream.New(ctx, sqlstream.Options{DB: db, Table: table, Policy: stream.PolicyValue{Partitions: mpPartitions}})
	if err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for b := range mpBatches {
		key := ""
		if b%3 != 0 {
			key = fmt.Sprintf("%s-k%d", id, b%7)
		}
		var batch []stream.RecordValue
		var ids []string
		for r := range 1 + b%3 {
			p := fmt.Sprintf("%s-b%d-r%d", id, b, r)
			batch = append(batch, stream.RecordValue{Key: []byte(key), Payload: []byte(p)})
			ids = append(ids, p)
		}
		v, err := s.Append(ctx, batch)
		if err != nil {
			return fmt.Errorf("batch %d: %w", b, err)
		}
		fmt.Fprintf(out, "ack %d %d %d %s\n", v.Partition, v.First, v.Last, strings.Join(ids, ","))
		// A producer that pauses, as real ones do: SQLite's busy handler
		// polls, and a writer in a tight loop would hold its lock all along.
		time.Sleep(500 * time.Microsecond)
	}
	return nil
}

// TestMultiProcessAppend runs two OS processes appending to one table at
// once: every offset of every partition is taken exactly once, with no gap,
// and holds what its Append acknowledged.
func TestMultiProcessAppend(t *testing.T) {
	if testing.Short() {
		t.Skip("process tier: skipped under -short (it re-runs the test binary as two appender processes); go test without -short runs it")
	}
	for _, d := range sqltest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			var dsn, table string
			var db *sqltest.DB
			if d == sqlstream.Postgres {
				dsn = sqltest.PostgresURL(t)
				db = sqltest.Postgres(t)
				table = db.Table("mp")
			} else {
				dsn = filepath.Join(t.TempDir(), "mp.db")
				db = sqltest.SQLiteAt(t, dsn)
				table = "mp"
			}
			start := time.Now().Add(300 * time.Millisecond).UnixNano()
			type child struct {
				cmd    *exec.Cmd
				stdout bytes.Buffer
				stderr bytes.Buffer
			}
			var children []*child
			for _, id := range []string{"A", "B"} {
				c := &child{cmd: exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")}
				c.cmd.Env = append(os.Environ(), envChild+"="+id, envDSN+"="+dsn, envTable+"="+table, envStart+"="+strconv.FormatInt(start, 10))
				c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
				if err := c.cmd.Start(); err != nil {
					t.Fatal(err)
				}
				children = append(children, c)
			}
			type ack struct {
				p     int
				first stream.Offset
				ids   []string
			}
			var acks []ack
			for i, c := range children {
				if err := c.cmd.Wait(); err != nil {
					t.Fatalf("appender %d: %v\n%s", i, err, c.stderr.String())
				}
				for _, line := range strings.Split(strings.TrimSpace(c.stdout.String()), "\n") {
					var a ack
					var last stream.Offset
					var ids string
					if _, err := fmt.Sscanf(line, "ack %d %d %d %s", &a.p, &a.first, &last, &ids); err != nil {
						t.Fatalf("appender %d printed %q: %v", i, line, err)
					}
					a.ids = strings.Split(ids, ",")
					acks = append(acks, a)
				}
			}
			if len(acks) != 2*mpBatches {
				t.Fatalf("%d acknowledged batches, want %d", len(acks), 2*mpBatches)
			}

			s := open(t, db, "mp", stream.PolicyValue{Partitions: mpPartitions})
			at := map[int][]stream.EntryValue{}
			total := 0
			for p := range mpPartitions {
				for from := stream.Offset(0); ; {
					es, err := s.Read(t.Context(), p, from, 500)
					if err != nil {
						t.Fatal(err)
					}
					if len(es) == 0 {
						break
					}
					at[p] = append(at[p], es...)
					from = es[len(es)-1].Offset + 1
				}
				for i, e := range at[p] {
					if e.Offset != stream.Offset(i) {
						t.Fatalf("partition %d: entry %d has offset %d: offsets are not gap-free", p, i, e.Offset)
					}
				}
				total += len(at[p])
			}
			want := 0
			for _, a := range acks {
				want += len(a.ids)
				for i, id := range a.ids {
					off := a.first + stream.Offset(i)
					if int(off) >= len(at[a.p]) || string(at[a.p][off].Record.Payload) != id {
						t.Fatalf("%s acknowledged at %d/%d, which does not hold it", id, a.p, off)
					}
				}
			}
			// The two processes' batches alternate in the partitions: they
			// did append at once.
			alternations := 0
			for p := range mpPartitions {
				for i := 1; i < len(at[p]); i++ {
					if at[p][i].Record.Payload[0] != at[p][i-1].Record.Payload[0] {
						alternations++
					}
				}
			}
			if total != want {
				t.Fatalf("the table holds %d records, %d were acknowledged", total, want)
			}
			if alternations == 0 {
				t.Fatal("the two processes' batches never alternated: they did not append concurrently")
			}
			t.Logf("%d records, %d alternations between the processes", total, alternations)
		})
	}
}
