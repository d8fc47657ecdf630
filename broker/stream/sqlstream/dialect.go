package sqlstream

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"

	"github.com/picomq/picomq/broker/stream"
)

// schemaVersion is the layout of the tables this engine creates and reads.
const schemaVersion = 1

// insertChunk is how many records one INSERT carries at most: 4 parameters
// each, well under PostgreSQL's 65535 and SQLite's 32766.
const insertChunk = 1000

// deleteChunk is how many offsets one compaction DELETE names at most.
const deleteChunk = 500

// statements are the engine's SQL, written once for PostgreSQL with $n
// placeholders and rewritten to SQLite's ?n. Every table name in them went
// through tableNames: validated, then quoted.
type statements struct {
	create []string

	lockTables string // PostgreSQL: serialize creation across processes
	initMeta   string // $1 partitions, $2 version
	readMeta   string

	lockMeta string // the stream-wide row, taken first when MaxBytes > 0

	state     string // $1 partition [, $2 cutoff, $3 MaxInt64]: first, next, bytes, expired
	lockState string // the same, locking the partition's row

	upsertPart string // $1 partition, $2 records, $3 bytes: first, next, bytes after
	insertOne  string // one record
	insertFull string // insertChunk records

	sumBelow    string // $1 partition, $2 offset
	deleteBelow string
	setFirst    string // $1 partition, $2 first, $3 released bytes
	subBytes    string // $1 partition, $2 released bytes
	oldest      string // $1 partition, $2 from, $3 limit: offset, bytes
	partIDs     string
	held        string

	read string // $1 partition, $2 from, $3 max
	seek string // $1 partition, $2 from, $3 instant (ns): first offset at or after
	head string // $1 partition, $2 from: first stored offset

	old string // $1 partition, $2 from, $3 cutoff: compaction candidates

	commit    string // $1 group, $2 partition, $3 next
	committed string // $1 group, $2 partition

	dialect Dialect
	n       names
}

var placeholder = regexp.MustCompile(`\$(\d+)`)

func buildStatements(d Dialect, n names, p stream.PolicyValue) statements {
	blob, big, forUpdate := "bytea", "bigint", " FOR UPDATE"
	if d == SQLite {
		blob, big, forUpdate = "BLOB", "INTEGER", ""
	}
	// expired is the last offset of the partition's leading run of records
	// past RetainFor ($2 is the cutoff instant: a record appended at or
	// before it is past), NULL when the run is empty: retention by age
	// drops a prefix, stopping at the first record still young, as the
	// memory engine does.
	expired := "NULL"
	if p.RetainFor > 0 {
		expired = fmt.Sprintf(`(SELECT MAX(r.record_offset) FROM %[1]s r
			WHERE r.partition_id = p.partition_id AND r.record_offset >= p.first_offset
			AND r.record_offset < COALESCE((SELECT MIN(l.record_offset) FROM %[1]s l
				WHERE l.partition_id = p.partition_id AND l.record_offset >= p.first_offset
				AND l.appended_at_ns > $2), $3))`, n.records)
	}
	state := fmt.Sprintf(`SELECT p.first_offset, p.next_offset, p.bytes, %s FROM %s p WHERE p.partition_id = $1`, expired, n.parts)
	s := statements{
		create: []string{
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
				partition_id   integer NOT NULL,
				record_offset  %[2]s NOT NULL,
				appended_at_ns %[2]s NOT NULL,
				record_bytes   %[2]s NOT NULL,
				record_key     %[3]s NOT NULL,
				payload        %[3]s NOT NULL,
				PRIMARY KEY (partition_id, record_offset))`, n.records, big, blob),
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
				partition_id integer PRIMARY KEY,
				first_offset %[2]s NOT NULL,
				next_offset  %[2]s NOT NULL,
				bytes        %[2]s NOT NULL)`, n.parts, big),
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
				group_name   text NOT NULL,
				partition_id integer NOT NULL,
				next_offset  %s NOT NULL,
				PRIMARY KEY (group_name, partition_id))`, n.groups, big),
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
				id             integer PRIMARY KEY CHECK (id = 1),
				partitions     integer NOT NULL,
				schema_version integer NOT NULL)`, n.meta),
		},
		lockTables: `SELECT pg_advisory_xact_lock($1)`,
		initMeta:   fmt.Sprintf(`INSERT INTO %s (id, partitions, schema_version) VALUES (1, $1, $2) ON CONFLICT (id) DO NOTHING`, n.meta),
		readMeta:   fmt.Sprintf(`SELECT partitions, schema_version FROM %s WHERE id = 1`, n.meta),
		lockMeta:   fmt.Sprintf(`SELECT partitions FROM %s WHERE id = 1 FOR UPDATE`, n.meta),
		state:      state,
		lockState:  state + forUpdate,
		upsertPart: fmt.Sprintf(`INSERT INTO %s AS p (partition_id, first_offset, next_offset, bytes) VALUES ($1, 0, $2, $3)
			ON CONFLICT (partition_id) DO UPDATE SET next_offset = p.next_offset + excluded.next_offset, bytes = p.bytes + excluded.bytes
			RETURNING first_offset, next_offset, bytes`, n.parts),
		sumBelow:    fmt.Sprintf(`SELECT COALESCE(SUM(record_bytes), 0) FROM %s WHERE partition_id = $1 AND record_offset < $2`, n.records),
		deleteBelow: fmt.Sprintf(`DELETE FROM %s WHERE partition_id = $1 AND record_offset < $2`, n.records),
		setFirst:    fmt.Sprintf(`UPDATE %s SET first_offset = $2, bytes = bytes - $3 WHERE partition_id = $1`, n.parts),
		subBytes:    fmt.Sprintf(`UPDATE %s SET bytes = bytes - $2 WHERE partition_id = $1`, n.parts),
		oldest: fmt.Sprintf(`SELECT record_offset, record_bytes FROM %s WHERE partition_id = $1 AND record_offset >= $2
			ORDER BY record_offset LIMIT $3`, n.records),
		partIDs: fmt.Sprintf(`SELECT partition_id FROM %s ORDER BY partition_id`, n.parts),
		held:    fmt.Sprintf(`SELECT COALESCE(SUM(bytes), 0) FROM %s`, n.parts),
		read: fmt.Sprintf(`SELECT record_offset, appended_at_ns, record_key, payload FROM %s
			WHERE partition_id = $1 AND record_offset >= $2 ORDER BY record_offset LIMIT $3`, n.records),
		seek: fmt.Sprintf(`SELECT MIN(record_offset) FROM %s WHERE partition_id = $1 AND record_offset >= $2 AND appended_at_ns >= $3`, n.records),
		head: fmt.Sprintf(`SELECT MIN(record_offset) FROM %s WHERE partition_id = $1 AND record_offset >= $2`, n.records),
		old: fmt.Sprintf(`SELECT record_offset, appended_at_ns, record_key, record_bytes FROM %s
			WHERE partition_id = $1 AND record_offset >= $2 AND appended_at_ns <= $3 ORDER BY record_offset`, n.records),
		commit: fmt.Sprintf(`INSERT INTO %s AS g (group_name, partition_id, next_offset) VALUES ($1, $2, $3)
			ON CONFLICT (group_name, partition_id) DO UPDATE SET next_offset = excluded.next_offset`, n.groups),
		committed: fmt.Sprintf(`SELECT next_offset FROM %s WHERE group_name = $1 AND partition_id = $2`, n.groups),
		dialect:   d,
		n:         n,
	}
	s.insertOne = s.insert(1)
	s.insertFull = s.insert(insertChunk)
	if d == SQLite {
		s.lockMeta = "" // BEGIN IMMEDIATE holds the database's write lock
		for _, p := range []*string{&s.initMeta, &s.readMeta, &s.state, &s.lockState, &s.upsertPart,
			&s.insertOne, &s.insertFull, &s.sumBelow, &s.deleteBelow, &s.setFirst, &s.subBytes, &s.oldest,
			&s.read, &s.seek, &s.head, &s.old, &s.commit, &s.committed} {
			*p = s.rebind(*p)
		}
	}
	return s
}

// rebind rewrites $n placeholders to SQLite's ?n, which binds by number as
// $n does in PostgreSQL (SQLite reads $1 as a name, numbered by first use).
func (s statements) rebind(q string) string {
	if s.dialect != SQLite {
		return q
	}
	return placeholder.ReplaceAllString(q, "?$1")
}

// insert is the INSERT of n records of one batch: $1 partition, $2 instant,
// then offset, bytes, key and payload of each.
func (s statements) insert(n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `INSERT INTO %s (partition_id, appended_at_ns, record_offset, record_bytes, record_key, payload) VALUES `, s.n.records)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		k := 3 + 4*i
		fmt.Fprintf(&b, "($1, $2, $%d, $%d, $%d, $%d)", k, k+1, k+2, k+3)
	}
	return s.rebind(b.String())
}

// deleteIn is the DELETE of n offsets of partition $1.
func (s statements) deleteIn(n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `DELETE FROM %s WHERE partition_id = $1 AND record_offset IN (`, s.n.records)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "$%d", i+2)
	}
	b.WriteByte(')')
	return s.rebind(b.String())
}

// lockKey is the PostgreSQL advisory lock serializing the creation of one
// stream's tables, so that two processes starting at once do not race on
// CREATE TABLE IF NOT EXISTS.
func (s statements) lockKey() int64 {
	h := fnv.New64a()
	h.Write([]byte("picomq/sqlstream:" + s.n.records))
	return int64(h.Sum64() & math.MaxInt64)
}

// migrate creates the stream's tables when missing and checks what they
// hold against the policy.
func (e *Stream) migrate(ctx context.Context) error {
	const op = "New"
	return e.write(ctx, op, false, func(ctx context.Context, q querier, _ func(func())) error {
		if e.dialect == Postgres {
			if _, err := q.ExecContext(ctx, e.q.lockTables, e.q.lockKey()); err != nil {
				return e.fail(ctx, op, "lock tables", err)
			}
		}
		for _, c := range e.q.create {
			if _, err := q.ExecContext(ctx, c); err != nil {
				return e.fail(ctx, op, "create tables", err)
			}
		}
		if _, err := q.ExecContext(ctx, e.q.initMeta, e.policy.Partitions, schemaVersion); err != nil {
			return e.fail(ctx, op, "initialize meta", err)
		}
		var partitions, version int
		if err := q.QueryRowContext(ctx, e.q.readMeta).Scan(&partitions, &version); err != nil {
			return e.fail(ctx, op, "read meta", err)
		}
		if version != schemaVersion {
			return misconfigured("Table", e.names.table, fmt.Sprintf("its tables are of schema version %d, this engine reads %d", version, schemaVersion))
		}
		if partitions != e.policy.Partitions {
			return stream.StreamMisconfigured.With("field", "Partitions", "value", e.policy.Partitions, "stored", partitions)
		}
		return nil
	})
}

// retryable reports whether err ends a transaction of the engine's own that
// may succeed when run again: SQLite's busy and locked (another connection
// holds the write lock, or a snapshot went stale), PostgreSQL's
// serialization failure and deadlock.
func retryable(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
			return true
		}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40001" || pe.Code == "40P01"
	}
	return false
}
