package sqlstream

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
)

// Stream is one stream kept in tables of an SQL database. It implements
// stream.Stream, stream.Waker (appends through this value only), Seeker,
// Trimmer, Compactor and Committer, and is safe for concurrent use by
// goroutines and by every process that opens the same tables.
type Stream struct {
	db      *sql.DB
	tr      Transactor
	dialect Dialect
	names   names
	policy  stream.PolicyValue // normalized
	now     func() time.Time
	q       statements

	mu   sync.Mutex
	turn int // the partition the next unkeyed batch of this value goes to
	wake chan struct{}
	room chan struct{}
}

var (
	_ stream.Stream    = (*Stream)(nil)
	_ stream.Waker     = (*Stream)(nil)
	_ stream.Seeker    = (*Stream)(nil)
	_ stream.Trimmer   = (*Stream)(nil)
	_ stream.Compactor = (*Stream)(nil)
	_ stream.Committer = (*Stream)(nil)
)

// querier is what a statement runs on: the caller's *sql.Tx, one of the
// engine's own, its *sql.Conn, or the *sql.DB.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// DB returns the database the stream is kept in.
func (e *Stream) DB() *sql.DB { return e.db }

// Dialect returns the SQL the engine speaks to DB.
func (e *Stream) Dialect() Dialect { return e.dialect }

// Table returns the records table's name as configured.
func (e *Stream) Table() string { return e.names.table }

// Partitions implements stream.Stream.
func (e *Stream) Partitions() int { return e.policy.Partitions }

// InTx runs fn with a ctx carrying a transaction of the stream's database —
// the one ctx carries already, or a new one committed when fn returns nil
// and rolled back otherwise — so that the engine's Append and Commit called
// with it join the writes fn makes through TxFrom(ctx, DB()). The
// subscriber uses it to commit a group's offset in the handler's own
// transaction.
func (e *Stream) InTx(ctx context.Context, fn func(ctx context.Context) error) error {
	if e.tx(ctx) != nil {
		return fn(ctx)
	}
	return InTx(ctx, e.db, nil, func(ctx context.Context, _ *sql.Tx) error { return fn(ctx) })
}

// tx returns the caller's transaction ctx carries, if any.
func (e *Stream) tx(ctx context.Context) *sql.Tx {
	if tx := e.tr.Tx(ctx); tx != nil {
		return tx
	}
	return TxFrom(ctx, e.db)
}

// fail returns what a failed statement of operation op, at step, becomes:
// ctx's cause when ctx ended, a coded error unchanged, and anything else
// STREAM_BACKEND_FAILED naming the operation and the step.
func (e *Stream) fail(ctx context.Context, op, step string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if _, ok := errs.As(err); ok {
		return err
	}
	return stream.StreamBackendFailed.Wrap(err, "operation", op, "step", step, "table", e.names.table)
}

// maxBusy bounds how long an operation of the engine's own keeps retrying a
// busy database, when ctx sets no earlier deadline.
const maxBusy = 30 * time.Second

// write runs fn as one atomic unit of the operation op.
//
// When ctx carries the caller's transaction, fn runs in it, under a
// savepoint: a refusal or a failure rolls back the engine's statements only,
// and the caller decides about the rest. What fn defers with after runs once
// that transaction commits, when InTx manages it, and at once otherwise.
//
// Otherwise fn runs in a transaction of the engine's own — BEGIN IMMEDIATE
// on SQLite, so that it holds the write lock from the start — retried while
// the database answers busy, or, when single is true and the dialect is
// PostgreSQL, with no transaction at all (fn runs one statement). What fn
// defers runs after the commit.
func (e *Stream) write(ctx context.Context, op string, single bool, fn func(ctx context.Context, q querier, after func(func())) error) error {
	if tx := e.tx(ctx); tx != nil {
		if single {
			// One statement needs no savepoint: it takes effect whole or
			// not at all.
			return fn(ctx, tx, func(f func()) { afterCommit(ctx, e.db, f) })
		}
		return e.joined(ctx, op, tx, fn)
	}
	var hooks []func()
	after := func(f func()) { hooks = append(hooks, f) }
	err := e.retry(ctx, func() error {
		hooks = hooks[:0]
		switch {
		case single && e.dialect == Postgres:
			return fn(ctx, e.db, after)
		case e.dialect == SQLite:
			return e.sqliteTx(ctx, op, func(q querier) error { return fn(ctx, q, after) })
		default:
			return e.pgTx(ctx, op, func(q querier) error { return fn(ctx, q, after) })
		}
	})
	if err != nil {
		return err
	}
	for _, f := range hooks {
		f()
	}
	return nil
}

// retry runs f — statements of the engine's own, outside any caller's
// transaction — again while the database answers busy (another connection
// holds the lock: a DSN with no busy_timeout, or SQLite's rollback journal,
// whose readers wait for writers too), backing off, until ctx ends or
// maxBusy passes. Nothing of a busy attempt was committed.
func (e *Stream) retry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(maxBusy)
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || !retryable(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(min(time.Duration(attempt)*time.Millisecond, 20*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// read runs f, a read of the engine's own, retried while the database is
// busy; in the caller's transaction it runs once.
func (e *Stream) read(ctx context.Context, f func(q querier) error) error {
	if tx := e.tx(ctx); tx != nil {
		return f(tx)
	}
	return e.retry(ctx, func() error { return f(e.db) })
}

const savepoint = "picomq_sqlstream"

func (e *Stream) joined(ctx context.Context, op string, tx *sql.Tx, fn func(ctx context.Context, q querier, after func(func())) error) error {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+savepoint); err != nil {
		return e.fail(ctx, op, "savepoint", err)
	}
	var hooks []func()
	if err := fn(ctx, tx, func(f func()) { hooks = append(hooks, f) }); err != nil {
		// The rollback must run even when ctx has ended: the caller's
		// transaction outlives this call.
		bg := context.WithoutCancel(ctx)
		if _, rerr := tx.ExecContext(bg, "ROLLBACK TO SAVEPOINT "+savepoint); rerr == nil {
			_, _ = tx.ExecContext(bg, "RELEASE SAVEPOINT "+savepoint)
		}
		return err
	}
	if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+savepoint); err != nil {
		return e.fail(ctx, op, "release savepoint", err)
	}
	for _, f := range hooks {
		afterCommit(ctx, e.db, f)
	}
	return nil
}

func (e *Stream) pgTx(ctx context.Context, op string, fn func(q querier) error) error {
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		return e.fail(ctx, op, "begin", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return e.fail(ctx, op, "commit", err)
	}
	return nil
}

// sqliteTx runs fn between BEGIN IMMEDIATE and COMMIT on one connection:
// database/sql's BeginTx would open a deferred transaction, whose first read
// takes a snapshot that a concurrent writer can make stale before this one
// writes.
func (e *Stream) sqliteTx(ctx context.Context, op string, fn func(q querier) error) error {
	conn, err := e.db.Conn(ctx)
	if err != nil {
		return e.fail(ctx, op, "connect", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return e.fail(ctx, op, "begin", err)
	}
	err = fn(conn)
	if err == nil {
		if _, err = conn.ExecContext(ctx, "COMMIT"); err == nil {
			return nil
		}
		err = e.fail(ctx, op, "commit", err)
	}
	if _, rerr := conn.ExecContext(context.Background(), "ROLLBACK"); rerr != nil {
		// A connection left inside a transaction must not go back to the
		// pool.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	return err
}

// snapshot runs fn on one snapshot of the database: the caller's
// transaction, or a read-only one of the engine's own.
func (e *Stream) snapshot(ctx context.Context, op string, fn func(q querier) error) error {
	if tx := e.tx(ctx); tx != nil {
		return fn(tx)
	}
	opts := &sql.TxOptions{ReadOnly: true}
	if e.dialect == Postgres {
		opts.Isolation = sql.LevelRepeatableRead
	}
	return e.retry(ctx, func() error {
		tx, err := e.db.BeginTx(ctx, opts)
		if err != nil {
			return e.fail(ctx, op, "begin", err)
		}
		defer func() { _ = tx.Rollback() }()
		return fn(tx)
	})
}

// pstate is a partition's row: its stored bounds and bytes, and the last
// offset of its leading run of records past RetainFor (valid only then).
type pstate struct {
	first, next int64
	bytes       int64
	expired     sql.NullInt64
}

// retained returns the first offset the partition retains once its
// records past RetainFor are gone.
func (s pstate) retained() int64 {
	if s.expired.Valid && s.expired.Int64+1 > s.first {
		return s.expired.Int64 + 1
	}
	return s.first
}

func (s pstate) bounds() stream.BoundsValue {
	return stream.BoundsValue{First: stream.Offset(s.retained()), Next: stream.Offset(s.next)}
}

// state reads partition's row; a partition never appended to has none and
// reads as empty. lock takes the row's lock on PostgreSQL.
func (e *Stream) state(ctx context.Context, q querier, op string, partition int, now time.Time, lock bool) (pstate, error) {
	stmt := e.q.state
	if lock {
		stmt = e.q.lockState
	}
	args := []any{partition}
	if e.policy.RetainFor > 0 {
		args = append(args, now.Add(-e.policy.RetainFor).UnixNano(), int64(math.MaxInt64))
	}
	var s pstate
	err := q.QueryRowContext(ctx, stmt, args...).Scan(&s.first, &s.next, &s.bytes, &s.expired)
	if errors.Is(err, sql.ErrNoRows) {
		return pstate{}, nil
	}
	if err != nil {
		return pstate{}, e.fail(ctx, op, "read partition", err)
	}
	return s, nil
}

// bounds reads partition's bounds as the reader sees them: records past
// RetainFor are gone even before a write deletes them.
func (e *Stream) bounds(ctx context.Context, q querier, op string, partition int) (stream.BoundsValue, error) {
	s, err := e.state(ctx, q, op, partition, e.now(), false)
	return s.bounds(), err
}

// dropBelow deletes partition's records below first, makes first its first
// retained offset and returns the bytes released. The caller holds the
// partition's lock.
func (e *Stream) dropBelow(ctx context.Context, q querier, op string, partition int, first int64) (int64, error) {
	var released int64
	if err := q.QueryRowContext(ctx, e.q.sumBelow, partition, first).Scan(&released); err != nil {
		return 0, e.fail(ctx, op, "measure trimmed records", err)
	}
	if _, err := q.ExecContext(ctx, e.q.deleteBelow, partition, first); err != nil {
		return 0, e.fail(ctx, op, "delete trimmed records", err)
	}
	if _, err := q.ExecContext(ctx, e.q.setFirst, partition, first, released); err != nil {
		return 0, e.fail(ctx, op, "update partition", err)
	}
	return released, nil
}

// expire deletes partition's leading records past RetainFor at now, and
// returns its state after. The caller holds the partition's lock.
func (e *Stream) expire(ctx context.Context, q querier, op string, partition int, now time.Time) (pstate, int64, error) {
	s, err := e.state(ctx, q, op, partition, now, true)
	if err != nil {
		return s, 0, err
	}
	first := s.retained()
	if first == s.first {
		return s, 0, nil
	}
	released, err := e.dropBelow(ctx, q, op, partition, first)
	if err != nil {
		return s, 0, err
	}
	s.first, s.bytes, s.expired = first, s.bytes-released, sql.NullInt64{}
	return s, released, nil
}

// lockMeta takes the stream-wide row that every writer takes first when
// MaxBytes bounds the whole stream, so that the bytes it holds are counted
// by one writer at a time. SQLite's write lock already is that.
func (e *Stream) lockMeta(ctx context.Context, q querier, op string) error {
	if e.policy.MaxBytes == 0 || e.q.lockMeta == "" {
		return nil
	}
	var n int
	if err := q.QueryRowContext(ctx, e.q.lockMeta).Scan(&n); err != nil {
		return e.fail(ctx, op, "lock stream", err)
	}
	return nil
}

// held expires every partition and returns the bytes the stream holds.
// The caller holds the stream-wide lock.
func (e *Stream) held(ctx context.Context, q querier, op string, now time.Time, after func(func())) (int64, error) {
	if e.policy.RetainFor > 0 {
		rows, err := q.QueryContext(ctx, e.q.partIDs)
		if err != nil {
			return 0, e.fail(ctx, op, "list partitions", err)
		}
		var ids []int
		for rows.Next() {
			var id int
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return 0, e.fail(ctx, op, "list partitions", err)
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			return 0, e.fail(ctx, op, "list partitions", err)
		}
		rows.Close()
		var released int64
		for _, id := range ids {
			_, r, err := e.expire(ctx, q, op, id, now)
			if err != nil {
				return 0, err
			}
			released += r
		}
		if released > 0 {
			after(e.signalRoom)
		}
	}
	var held int64
	if err := q.QueryRowContext(ctx, e.q.held).Scan(&held); err != nil {
		return 0, e.fail(ctx, op, "measure stream", err)
	}
	return held, nil
}

// errWait ends a write that found no room under MaxBytes yet: the
// transaction is rolled back, and Append waits before it tries again.
var errWait = errors.New("sqlstream: wait for room")

// pollEvery is how often an Append waiting for room looks again: retention
// by age frees room as the clock moves, and other processes' trims and
// compactions signal nothing here.
const (
	pollEvery         = 5 * time.Millisecond
	pollEveryNoExpiry = 25 * time.Millisecond
)

// Append implements stream.Stream. When ctx carries a transaction of the
// stream's database, the batch is written in it and visible once it
// commits; the partition's row stays locked until then, so keep such
// transactions short.
func (e *Stream) Append(ctx context.Context, records []stream.RecordValue) (stream.AppendValue, error) {
	const op = "Append"
	if ctx.Err() != nil {
		return stream.AppendValue{}, context.Cause(ctx)
	}
	partition, err := stream.CheckBatch(e.policy, records)
	if err != nil {
		return stream.AppendValue{}, err
	}
	batch := stream.BatchBytes(records)
	every := pollEveryNoExpiry
	if e.policy.RetainFor > 0 {
		every = pollEvery
	}
	rw := stream.NewRoomWait(e.policy, every)
	defer rw.Stop()
	for {
		room := e.roomSignal() // before the look, so a release after it is not missed
		var v stream.AppendValue
		err := e.write(ctx, op, false, func(ctx context.Context, q querier, after func(func())) error {
			now := e.now()
			if e.policy.MaxBytes > 0 {
				if err := e.lockMeta(ctx, q, op); err != nil {
					return err
				}
				held, err := e.held(ctx, q, op, now, after)
				if err != nil {
					return err
				}
				wait, err := rw.Check(held, batch)
				if err != nil {
					return err
				}
				if wait {
					return errWait
				}
			}
			p := partition
			if p < 0 {
				p = e.nextTurn()
			}
			var err error
			v, err = e.insert(ctx, q, op, p, records, batch, now, after)
			return err
		})
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, errWait) {
			return stream.AppendValue{}, err
		}
		if err := rw.Wait(ctx, room); err != nil {
			return stream.AppendValue{}, err
		}
	}
}

func (e *Stream) nextTurn() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.turn
	e.turn = (e.turn + 1) % e.policy.Partitions
	return p
}

// insert writes an admitted batch to partition: it takes the partition's
// row — locking it until the transaction ends, which is what makes offsets
// gap-free and unique across processes —, moves its next offset past the
// batch, inserts the records, then applies retention.
func (e *Stream) insert(ctx context.Context, q querier, op string, partition int, records []stream.RecordValue,
	batch int64, now time.Time, after func(func())) (stream.AppendValue, error) {
	n := int64(len(records))
	var first, next, bytes int64
	if err := q.QueryRowContext(ctx, e.q.upsertPart, partition, n, batch).Scan(&first, &next, &bytes); err != nil {
		return stream.AppendValue{}, e.fail(ctx, op, "take offsets", err)
	}
	base := next - n
	at := now.UnixNano()
	for start := 0; start < len(records); start += insertChunk {
		chunk := records[start:min(start+insertChunk, len(records))]
		stmt := e.q.insertFull
		switch {
		case len(chunk) == 1:
			stmt = e.q.insertOne
		case len(chunk) != insertChunk:
			stmt = e.q.insert(len(chunk))
		}
		args := make([]any, 0, 2+4*len(chunk))
		args = append(args, partition, at)
		for i, r := range chunk {
			args = append(args, base+int64(start+i), stream.RecordBytes(r), nonNil(r.Key), nonNil(r.Payload))
		}
		if _, err := q.ExecContext(ctx, stmt, args...); err != nil {
			return stream.AppendValue{}, e.fail(ctx, op, "insert records", err)
		}
	}
	var released int64
	if e.policy.RetainFor > 0 {
		s, r, err := e.expire(ctx, q, op, partition, now)
		if err != nil {
			return stream.AppendValue{}, err
		}
		first, bytes, released = s.first, s.bytes, r
	}
	if limit := e.policy.RetainBytes; limit > 0 && bytes > limit {
		r, err := e.retainBytes(ctx, q, op, partition, first, bytes-limit)
		if err != nil {
			return stream.AppendValue{}, err
		}
		released += r
	}
	after(e.signalWake)
	if released > 0 {
		after(e.signalRoom)
	}
	return stream.AppendValue{Partition: partition, First: stream.Offset(base), Last: stream.Offset(next - 1)}, nil
}

// retainBytes drops partition's oldest records until over bytes are
// released, as RetainBytes asks.
func (e *Stream) retainBytes(ctx context.Context, q querier, op string, partition int, from, over int64) (int64, error) {
	const page = 256
	for over > 0 {
		rows, err := q.QueryContext(ctx, e.q.oldest, partition, from, page)
		if err != nil {
			return 0, e.fail(ctx, op, "retain bytes", err)
		}
		seen := 0
		for rows.Next() && over > 0 {
			var off, size int64
			if err := rows.Scan(&off, &size); err != nil {
				rows.Close()
				return 0, e.fail(ctx, op, "retain bytes", err)
			}
			seen++
			over -= size
			from = off + 1
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return 0, e.fail(ctx, op, "retain bytes", err)
		}
		if seen == 0 {
			break
		}
	}
	return e.dropBelow(ctx, q, op, partition, from)
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func orNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// Read implements stream.Stream. It reads the records first and the bounds
// after, each statement on a snapshot at least as late as the one before:
// a Trim committed between them makes the read OFFSET_TRIMMED rather than a
// silent skip, and a batch not yet committed is never read.
func (e *Stream) Read(ctx context.Context, partition int, from stream.Offset, max int) ([]stream.EntryValue, error) {
	const op = "Read"
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	if err := stream.CheckPartition(partition, e.policy.Partitions); err != nil {
		return nil, err
	}
	if err := stream.CheckMax(max); err != nil {
		return nil, err
	}
	var out []stream.EntryValue
	err := e.read(ctx, func(q querier) error {
		var err error
		out, err = e.readRecords(ctx, q, partition, from, max)
		return err
	})
	if err != nil {
		return nil, err
	}
	var b stream.BoundsValue
	err = e.read(ctx, func(q querier) error {
		var err error
		b, err = e.bounds(ctx, q, op, partition)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := stream.CheckRead(partition, from, b); err != nil {
		return nil, err
	}
	return out, nil
}

// readRecords reads up to max records of partition from from on.
func (e *Stream) readRecords(ctx context.Context, q querier, partition int, from stream.Offset, max int) ([]stream.EntryValue, error) {
	const op = "Read"
	out := []stream.EntryValue{}
	if from <= math.MaxInt64 {
		rows, err := q.QueryContext(ctx, e.q.read, partition, int64(from), int64(max))
		if err != nil {
			return nil, e.fail(ctx, op, "read records", err)
		}
		for rows.Next() {
			var (
				off, at      int64
				key, payload []byte
			)
			if err := rows.Scan(&off, &at, &key, &payload); err != nil {
				rows.Close()
				return nil, e.fail(ctx, op, "read records", err)
			}
			out = append(out, stream.EntryValue{
				AppendedAt: time.Unix(0, at).UTC(),
				Record:     stream.RecordValue{Key: orNil(key), Payload: orNil(payload)},
				Partition:  partition,
				Offset:     stream.Offset(off),
			})
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, e.fail(ctx, op, "read records", err)
		}
	}
	return out, nil
}

// Bounds implements stream.Stream.
func (e *Stream) Bounds(ctx context.Context, partition int) (stream.BoundsValue, error) {
	if ctx.Err() != nil {
		return stream.BoundsValue{}, context.Cause(ctx)
	}
	if err := stream.CheckPartition(partition, e.policy.Partitions); err != nil {
		return stream.BoundsValue{}, err
	}
	var b stream.BoundsValue
	err := e.read(ctx, func(q querier) error {
		var err error
		b, err = e.bounds(ctx, q, "Bounds", partition)
		return err
	})
	return b, err
}

// Wake implements stream.Waker: the channel is closed by the next Append
// through this value once its batch is committed — at once when it joined
// a transaction its caller commits (WithTx).
func (e *Stream) Wake() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.wake == nil {
		e.wake = make(chan struct{})
	}
	return e.wake
}

func (e *Stream) signalWake() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.wake != nil {
		close(e.wake)
		e.wake = nil
	}
}

func (e *Stream) roomSignal() <-chan struct{} {
	if e.policy.MaxBytes == 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.room == nil {
		e.room = make(chan struct{})
	}
	return e.room
}

func (e *Stream) signalRoom() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.room != nil {
		close(e.room)
		e.room = nil
	}
}

// OffsetAt implements stream.Seeker.
func (e *Stream) OffsetAt(ctx context.Context, partition int, t time.Time) (stream.Offset, error) {
	const op = "OffsetAt"
	if ctx.Err() != nil {
		return 0, context.Cause(ctx)
	}
	if err := stream.CheckPartition(partition, e.policy.Partitions); err != nil {
		return 0, err
	}
	var out stream.Offset
	err := e.snapshot(ctx, op, func(q querier) error {
		s, err := e.state(ctx, q, op, partition, e.now(), false)
		if err != nil {
			return err
		}
		first := s.retained()
		var hit, head sql.NullInt64
		if err := q.QueryRowContext(ctx, e.q.seek, partition, first, t.UnixNano()).Scan(&hit); err != nil {
			return e.fail(ctx, op, "seek", err)
		}
		if !hit.Valid {
			out = stream.Offset(s.next)
			return nil
		}
		if err := q.QueryRowContext(ctx, e.q.head, partition, first).Scan(&head); err != nil {
			return e.fail(ctx, op, "seek", err)
		}
		if head.Valid && head.Int64 == hit.Int64 {
			out = stream.Offset(first) // a compacted head still starts at First
		} else {
			out = stream.Offset(hit.Int64)
		}
		return nil
	})
	return out, err
}

// Trim implements stream.Trimmer.
func (e *Stream) Trim(ctx context.Context, partition int, before stream.Offset) error {
	const op = "Trim"
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err := stream.CheckPartition(partition, e.policy.Partitions); err != nil {
		return err
	}
	return e.write(ctx, op, false, func(ctx context.Context, q querier, after func(func())) error {
		if err := e.lockMeta(ctx, q, op); err != nil {
			return err
		}
		s, released, err := e.expire(ctx, q, op, partition, e.now())
		if err != nil {
			return err
		}
		if err := stream.CheckOffset(partition, before, s.bounds()); err != nil {
			return err
		}
		if int64(before) > s.first {
			r, err := e.dropBelow(ctx, q, op, partition, int64(before))
			if err != nil {
				return err
			}
			released += r
		}
		if released > 0 {
			after(e.signalRoom)
		}
		return nil
	})
}

// Compact implements stream.Compactor.
func (e *Stream) Compact(ctx context.Context, partition int) (stream.CompactValue, error) {
	const op = "Compact"
	if ctx.Err() != nil {
		return stream.CompactValue{}, context.Cause(ctx)
	}
	if err := stream.CheckPartition(partition, e.policy.Partitions); err != nil {
		return stream.CompactValue{}, err
	}
	window := e.policy.CompactAfter
	if window == 0 {
		return stream.CompactValue{}, nil
	}
	var v stream.CompactValue
	err := e.write(ctx, op, false, func(ctx context.Context, q querier, after func(func())) error {
		v = stream.CompactValue{}
		if err := e.lockMeta(ctx, q, op); err != nil {
			return err
		}
		now := e.now()
		s, released, err := e.expire(ctx, q, op, partition, now)
		if err != nil {
			return err
		}
		// The records at least a window old, the only ones a compaction
		// may drop, without their payloads.
		type old struct {
			offset, at, size int64
			key              []byte
		}
		rows, err := q.QueryContext(ctx, e.q.old, partition, s.first, now.Add(-window).UnixNano())
		if err != nil {
			return e.fail(ctx, op, "scan records", err)
		}
		var olds []old
		for rows.Next() {
			var o old
			if err := rows.Scan(&o.offset, &o.at, &o.key, &o.size); err != nil {
				rows.Close()
				return e.fail(ctx, op, "scan records", err)
			}
			olds = append(olds, o)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return e.fail(ctx, op, "scan records", err)
		}
		// The last old record of each key supersedes every earlier one; a
		// younger record does not count, as a reader inside the window may
		// yet read it.
		last := make(map[string]int64)
		for _, o := range olds {
			if len(o.key) > 0 {
				last[string(o.key)] = o.offset
			}
		}
		twice := now.Add(-2 * window).UnixNano()
		var drop []any
		var dropped int64
		for _, o := range olds {
			if len(o.key) == 0 {
				continue
			}
			superseded := last[string(o.key)] != o.offset
			tombstone := o.size == int64(len(o.key)) && o.at <= twice
			if superseded || tombstone {
				drop = append(drop, o.offset)
				dropped += o.size
			}
		}
		for start := 0; start < len(drop); start += deleteChunk {
			chunk := drop[start:min(start+deleteChunk, len(drop))]
			if _, err := q.ExecContext(ctx, e.q.deleteIn(len(chunk)), append([]any{partition}, chunk...)...); err != nil {
				return e.fail(ctx, op, "delete superseded records", err)
			}
		}
		if dropped > 0 {
			if _, err := q.ExecContext(ctx, e.q.subBytes, partition, dropped); err != nil {
				return e.fail(ctx, op, "update partition", err)
			}
		}
		v.Scanned = int64(len(olds))
		v.Dropped = int64(len(drop))
		v.Kept = v.Scanned - v.Dropped
		if released+dropped > 0 {
			after(e.signalRoom)
		}
		return nil
	})
	if err != nil {
		return stream.CompactValue{}, err
	}
	return v, nil
}

// Commit implements stream.Committer. When ctx carries a transaction of the
// stream's database, the offset is written in it: a handler that makes its
// own writes and commits its offset in one transaction is exactly-once in
// effect.
func (e *Stream) Commit(ctx context.Context, group string, partition int, next stream.Offset) error {
	const op = "Commit"
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err := stream.CheckGroup(group); err != nil {
		return err
	}
	if err := stream.CheckPartition(partition, e.policy.Partitions); err != nil {
		return err
	}
	// The bounds and the write need no lock between them: the next offset
	// only grows, so an offset not past it stays not past it. Below First
	// is kept as it is: the group's next Read reports OFFSET_TRIMMED.
	var b stream.BoundsValue
	err := e.read(ctx, func(q querier) error {
		var err error
		b, err = e.bounds(ctx, q, op, partition)
		return err
	})
	if err != nil {
		return err
	}
	if err := stream.CheckOffset(partition, next, b); err != nil {
		return err
	}
	return e.write(ctx, op, true, func(ctx context.Context, q querier, _ func(func())) error {
		if _, err := q.ExecContext(ctx, e.q.commit, group, partition, int64(next)); err != nil {
			return e.fail(ctx, op, "write group offset", err)
		}
		return nil
	})
}

// Committed implements stream.Committer.
func (e *Stream) Committed(ctx context.Context, group string, partition int) (stream.Offset, error) {
	const op = "Committed"
	if ctx.Err() != nil {
		return 0, context.Cause(ctx)
	}
	if err := stream.CheckGroup(group); err != nil {
		return 0, err
	}
	if err := stream.CheckPartition(partition, e.policy.Partitions); err != nil {
		return 0, err
	}
	var next int64
	found := true
	err := e.read(ctx, func(q querier) error {
		err := q.QueryRowContext(ctx, e.q.committed, group, partition).Scan(&next)
		if errors.Is(err, sql.ErrNoRows) {
			found = false
			return nil
		}
		return e.fail(ctx, op, "read group offset", err)
	})
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, stream.NoCommit(group, partition)
	}
	return stream.Offset(next), nil
}
