package sqlstream_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
)

// ready is the line an appender prints once it has opened the database;
// it then waits for its stdin to close, which the test does for every
// appender at once, so that they start together.
const ready = "ready"

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
	fmt.Println(ready)
	if _, err := io.Copy(io.Discard, os.Stdin); err != nil {
		return fmt.Errorf("wait for the start: %w", err)
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
		// (Pacing, not a wait for a condition.)
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
			type child struct {
				cmd    *exec.Cmd
				stdin  io.WriteCloser
				stdout *bufio.Reader
				stderr bytes.Buffer
				out    chan []byte // the rest of stdout, once read
			}
			var children []*child
			for _, id := range []string{"A", "B"} {
				c := &child{cmd: exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$"), out: make(chan []byte, 1)}
				c.cmd.Env = append(os.Environ(), envChild+"="+id, envDSN+"="+dsn, envTable+"="+table)
				c.cmd.Stderr = &c.stderr
				var err error
				if c.stdin, err = c.cmd.StdinPipe(); err != nil {
					t.Fatal(err)
				}
				stdout, err := c.cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				c.stdout = bufio.NewReader(stdout)
				if err := c.cmd.Start(); err != nil {
					t.Fatal(err)
				}
				children = append(children, c)
			}
			// Once both have opened the database, start them together.
			for i, c := range children {
				if line, err := c.stdout.ReadString('\n'); strings.TrimSpace(line) != ready {
					_ = c.cmd.Wait()
					t.Fatalf("appender %d said %q (%v) instead of %q\n%s", i, line, err, ready, c.stderr.String())
				}
			}
			for _, c := range children {
				c.stdin.Close()
				go func() {
					b, _ := io.ReadAll(c.stdout)
					c.out <- b
				}()
			}
			type ack struct {
				p     int
				first stream.Offset
				ids   []string
			}
			var acks []ack
			for i, c := range children {
				stdout := <-c.out // read whole before Wait, as exec requires
				if err := c.cmd.Wait(); err != nil {
					t.Fatalf("appender %d: %v\n%s", i, err, c.stderr.String())
				}
				for _, line := range strings.Split(strings.TrimSpace(string(stdout)), "\n") {
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
