// Package sqlstream is the SQL engine: a stream.Stream kept in tables of the
// caller's own database — PostgreSQL through pgx, or SQLite through
// modernc.org/sqlite (pure Go, the embedded default) — whose appends and
// group commits can join the caller's transaction. That is the
// transactional outbox: a business write and the records announcing it
// commit together or not at all, and a consumer that commits its offset in
// the transaction of its own writes is exactly-once in effect.
//
//	db, _ := sqlstream.OpenPostgres(url) // or sqlstream.OpenSQLite(path)
//	s, err := sqlstream.New(ctx, sqlstream.Options{DB: db, Table: "order_events"})
//	err = sqlstream.InTx(ctx, db, nil, func(ctx context.Context, tx *sql.Tx) error {
//		if _, err := tx.ExecContext(ctx, `INSERT INTO orders ...`); err != nil {
//			return err
//		}
//		_, err := s.Append(ctx, []stream.RecordValue{{Key: id, Payload: event}})
//		return err
//	})
//
// It implements stream.Stream with Seeker, Trimmer, Compactor, Committer and
// — for appends through the same value, in this process — Waker, and passes
// the streamtest suite on both dialects: it refuses what the memory engine
// refuses, with the same errors and fields.
//
// # Tables
//
// Options.Table, say "events", names four tables, created when missing
// (CREATE TABLE IF NOT EXISTS, serialized across processes on PostgreSQL by
// an advisory lock):
//
//	events             (partition_id, record_offset) primary key, appended_at_ns, record_bytes, record_key, payload
//	events_partitions  partition_id primary key, first_offset, next_offset, bytes
//	events_groups      (group_name, partition_id) primary key, next_offset
//	events_meta        the partition count, fixed for the tables' life, and the schema version
//
// A table name is an identifier of letters, digits and underscores,
// optionally schema-qualified, validated at New and always double-quoted:
// it is never interpolated raw (SQL_STREAM_MISCONFIGURED, field Table,
// otherwise). Records keep their append instant in nanoseconds (Seeker,
// retention by age) and their size (RetainBytes, MaxBytes).
//
// # Offsets across processes
//
// An Append takes its partition's row with an INSERT ... ON CONFLICT DO
// UPDATE that moves next_offset past the batch and returns it: the row stays
// locked until the transaction ends, so the next batch of that partition —
// from any process — waits for it, and takes the offsets after it only once
// it committed, or the same ones if it rolled back. Offsets are therefore
// gap-free and unique per partition, assigned in commit order, and a reader
// (any isolation level) never sees a later batch before an earlier one, nor
// an uncommitted one. On SQLite the database's write lock serializes writers
// anyway: the engine's own transactions begin IMMEDIATE, and a busy database
// is waited out and retried. Appends to different partitions do not wait for
// each other on PostgreSQL.
//
// With MaxBytes, every writer first takes the stream-wide row of
// Table_meta, so that the bytes the stream holds are counted by one writer at
// a time: such a stream's appends are serialized. Retention runs lazily, as
// the memory engine's: a read computes what RetainFor has expired and
// never writes; the next write of the partition deletes it.
//
// # Transactions
//
// A Transactor finds the caller's transaction in a ctx: NewTransactor's
// finds what WithTx (a transaction the caller commits) and InTx (one it
// commits) put there; an application keeping its transaction under a ctx key
// of its own implements Transactor over it. When ctx carries a transaction
// of the engine's database, Append, Commit, Trim and Compact run in it —
// under a savepoint, so that a refusal or a failure undoes only the engine's
// statements — and the reads run in it too, seeing its uncommitted
// batches. Otherwise each operation is a transaction of the engine's own.
// Keep appending transactions short: they hold their partition's row. Readers
// are woken after InTx commits; with WithTx, at once (a wake is a hint).
//
// Statement failures are STREAM_BACKEND_FAILED naming the operation
// ("operation": Append, Read, ...), the step and the table, and wrapping the
// driver's error; a ctx that ended returns its cause.
//
// Every process opening one table should pass the same Policy: Partitions is
// checked against the stored count, the other fields are applied by each
// opener to its own operations.
package sqlstream
