package sqlstream_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/broker/stream/sqlstream"
	"github.com/picomq/picomq/broker/stream/subscriber"
)

// The transactional outbox of the README: an order and its event commit
// together, and a subscriber turns each event into a mail row in the
// transaction that commits its offset.
func Example_outbox() {
	dir, _ := os.MkdirTemp("", "outbox")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	db, err := sqlstream.OpenSQLite(filepath.Join(dir, "shop.db")) // or sqlstream.OpenPostgres(url)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	for _, ddl := range []string{`CREATE TABLE orders (id text PRIMARY KEY, total integer)`, `CREATE TABLE mails (order_id text)`} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			panic(err)
		}
	}
	events, err := sqlstream.New(ctx, sqlstream.Options{DB: db, Table: "order_events",
		Policy: stream.PolicyValue{Partitions: 4}})
	if err != nil {
		panic(err)
	}

	place := func(id string, total int, event []byte) error {
		// The order and its event commit together, or neither does.
		return sqlstream.InTx(ctx, db, nil, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, id, total); err != nil {
				return err
			}
			_, err := events.Append(ctx, []stream.RecordValue{{Key: []byte(id), Payload: event}})
			return err
		})
	}
	fmt.Println(place("o-1", 30, []byte("placed")))
	fmt.Println(place("o-1", 30, []byte("placed")) != nil) // a duplicate order: no event either

	// Each event once in effect: the mail row and the offset commit together.
	sub, err := subscriber.New(events, subscriber.Options{Group: "mailer", Idempotent: true,
		Logger: slog.New(slog.DiscardHandler), PollInterval: 10 * time.Millisecond,
		Handler: func(ctx context.Context, e stream.EntryValue) error {
			_, err := sqlstream.TxFrom(ctx, db).ExecContext(ctx, `INSERT INTO mails (order_id) VALUES ($1)`, string(e.Record.Key))
			return err
		}})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- sub.Run(runCtx) }()
	// Poll until the mail row is committed; ctx bounds the wait.
	var mails int
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for mails == 0 {
		select {
		case <-ctx.Done():
			panic("no mail row: " + ctx.Err().Error())
		case <-poll.C:
		}
		_ = db.QueryRowContext(ctx, `SELECT count(*) FROM mails`).Scan(&mails)
	}
	stop()
	fmt.Println(<-done, mails)
	// Output:
	// <nil>
	// true
	// <nil> 1
}
