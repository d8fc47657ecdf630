package sqlstream

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// Transactor tells the engine which transaction of its database, if any, a
// ctx carries. The engine joins that transaction — Append and Commit become
// part of it, visible only if it commits — and opens one of its own when
// there is none.
//
// NewTransactor's is the one most callers want: it finds what WithTx and InTx
// put in a ctx. An application that already keeps its transaction in a ctx
// under a key of its own implements Transactor over that key instead.
type Transactor interface {
	// DB is the database whose transactions the Transactor finds: the one the
	// engine opens its own transactions on, and whose tables it keeps.
	DB() *sql.DB
	// Tx returns the transaction of DB that ctx carries, or nil.
	Tx(ctx context.Context) *sql.Tx
}

// NewTransactor returns the Transactor that finds, in a ctx, the transaction
// of db that WithTx or InTx put there.
func NewTransactor(db *sql.DB) Transactor { return ctxTransactor{db} }

type ctxTransactor struct{ db *sql.DB }

func (c ctxTransactor) DB() *sql.DB                    { return c.db }
func (c ctxTransactor) Tx(ctx context.Context) *sql.Tx { return TxFrom(ctx, c.db) }

// txKey keys a ctx's transaction by its database, so that a ctx may carry
// transactions of several databases and each engine finds its own.
type txKey struct{ db *sql.DB }

// txState is what a ctx carries for one database's transaction.
type txState struct {
	tx *sql.Tx
	// managed is true when InTx opened the transaction and will commit it: an
	// engine then defers what must follow the commit (waking readers) until
	// it does. A transaction handed over with WithTx is committed by its
	// caller, out of the engine's sight, and those actions run at once.
	managed bool
	mu      sync.Mutex
	after   []func()
}

// WithTx returns a ctx carrying tx, a transaction of db the caller opened and
// will commit or roll back itself. An engine over db given this ctx joins tx.
//
// Readers in this process are woken when Append returns, not when tx
// commits: a wake is a hint, and a reader that finds nothing yet polls again.
// InTx, which commits the transaction itself, wakes them after the commit.
func WithTx(ctx context.Context, db *sql.DB, tx *sql.Tx) context.Context {
	return context.WithValue(ctx, txKey{db}, &txState{tx: tx})
}

// TxFrom returns the transaction of db that ctx carries, or nil.
func TxFrom(ctx context.Context, db *sql.DB) *sql.Tx {
	if st := stateOf(ctx, db); st != nil {
		return st.tx
	}
	return nil
}

func stateOf(ctx context.Context, db *sql.DB) *txState {
	st, _ := ctx.Value(txKey{db}).(*txState)
	return st
}

// InTx runs fn in a transaction of db and commits it when fn returns nil,
// rolling it back otherwise (and when fn panics). The ctx fn receives carries
// the transaction, so an engine over db called with it joins it: the
// business write fn makes and the records it appends commit together or not
// at all — the transactional outbox.
//
// When ctx already carries a transaction of db, fn runs in it and InTx
// neither commits nor rolls back: nested calls join the outermost one.
//
// opts is passed to db.BeginTx. The transaction is bound to ctx as
// database/sql binds it: ctx ending before the commit rolls it back.
func InTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions, fn func(ctx context.Context, tx *sql.Tx) error) (err error) {
	if st := stateOf(ctx, db); st != nil {
		return fn(ctx, st.tx)
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	st := &txState{tx: tx, managed: true}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	if err := fn(context.WithValue(ctx, txKey{db}, st), tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		if errors.Is(err, sql.ErrTxDone) && ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return err
	}
	committed = true
	st.mu.Lock()
	after := st.after
	st.after = nil
	st.mu.Unlock()
	for _, f := range after {
		f()
	}
	return nil
}

// afterCommit runs f once the transaction ctx carries for db commits, when
// InTx manages it, and at once otherwise.
func afterCommit(ctx context.Context, db *sql.DB, f func()) {
	if st := stateOf(ctx, db); st != nil && st.managed {
		st.mu.Lock()
		st.after = append(st.after, f)
		st.mu.Unlock()
		return
	}
	f()
}
