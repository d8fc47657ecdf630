package core

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/objstore"
	"github.com/picomq/picomq/broker/tier"
)

// TierConfig turns tiered storage on: sealed segments move to object
// storage (see package tier's decisions, which this file carries out).
type TierConfig struct {
	Bucket tier.Bucket
	Reader *tier.Reader
	Keys   tier.Keys
	Health *tier.Health
	TierDefaults
	// Interval is how often the tier loop runs (default 2 s).
	Interval time.Duration
	// UploadStagger is how long each replica of a segment waits after the
	// one before it in the replica set before it uploads too: the first
	// uploads at once, the next only if that did not happen (a dead or
	// cut-off member), so one segment is usually sent once (default 30 s).
	UploadStagger time.Duration
	// UploadTimeout bounds one upload (default 5 min).
	UploadTimeout time.Duration
	// OrphanGrace is how old a key no object names must be before the
	// leader deletes it (default 1 h); an upload is recorded within half
	// of it or sent again.
	OrphanGrace time.Duration
	// UploadBytesPerSecond bounds this broker's upload rate (0: none), so
	// that uploads leave the appends their disk, CPU and network: a
	// backlog then waits on the disk, under the headroom rule.
	UploadBytesPerSecond int64
}

func (c *TierConfig) defaults() {
	if c.Interval <= 0 {
		c.Interval = 2 * time.Second
	}
	if c.UploadStagger <= 0 {
		c.UploadStagger = 30 * time.Second
	}
	if c.UploadTimeout <= 0 {
		c.UploadTimeout = 5 * time.Minute
	}
	if c.OrphanGrace <= 0 {
		c.OrphanGrace = time.Hour
	}
}

// tiering is the tier loop's state.
type tiering struct {
	cfg *TierConfig
	// limit paces uploads (nil: UploadBytesPerSecond is 0).
	limit *rate.Limiter

	mu sync.Mutex
	// seen is when this member first saw each segment it could upload.
	seen map[uint64]time.Time
	// keysDeleted are garbage objects whose key the leader deleted: only
	// those may be forgotten by ObjectsDeleted.
	keysDeleted map[uint64]bool
	// garbageSince is when this member first saw each tiered garbage
	// object: its key is deleted GarbageGrace later, as local files are,
	// so a read that looked the range up just before still finds it.
	garbageSince map[uint64]time.Time
	// dropped are evicted objects this member holds no file of any more:
	// not looked at again.
	dropped  map[uint64]bool
	pending  int
	failed   int64
	backoff  time.Duration
	retryAt  time.Time
	lastScan time.Time
}

// TierStatus is this broker's view of object storage.
type TierStatus struct {
	Enabled          bool
	Endpoint, Bucket string
	Prefix           string
	Reachable        bool
	LastError        error
	LastSuccess      time.Time
	UploadsPending   int
	UploadsFailed    int64
	// TieredBytes is the cluster's, from the state.
	TieredBytes int64
}

// TierStatus reports object storage as this broker sees it.
func (b *Broker) TierStatus() TierStatus {
	t := b.tiering
	if t == nil {
		return TierStatus{}
	}
	st := TierStatus{Enabled: true, Prefix: t.cfg.Keys.Prefix}
	st.Endpoint, st.Bucket = t.cfg.Bucket.Describe()
	st.Reachable, st.LastError, st.LastSuccess = t.cfg.Health.Snapshot()
	t.mu.Lock()
	st.UploadsPending, st.UploadsFailed = t.pending, t.failed
	t.mu.Unlock()
	b.fsm.View(func(s *meta.State) {
		for _, o := range s.Objects {
			if o.Tier != nil {
				st.TieredBytes += o.Tier.Size
			}
		}
	})
	return st
}

// tierLoop runs the tier's passes until the broker stops. It is its own
// goroutine: a slow or unreachable bucket must never hold up merges,
// retention or checkpoints.
func (b *Broker) tierLoop() {
	t := b.tiering
	tick := time.NewTicker(t.cfg.Interval)
	defer tick.Stop()
	ctx, cancel := b.untilStopped()
	defer cancel()
	// Tell the status at once whether the bucket answers.
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	if err := t.cfg.Bucket.Probe(pctx); err != nil {
		b.cfg.Logger.Warn("object storage does not answer", "err", err)
	}
	pcancel()
	for {
		select {
		case <-b.stop:
			return
		case <-tick.C:
		}
		b.tierPass(ctx)
	}
}

// tierPass uploads what this member should, drops the local copies the
// log evicted and, on the metadata leader, evicts, deletes the keys of
// garbage and collects orphaned keys.
func (b *Broker) tierPass(ctx context.Context) {
	t := b.tiering
	now := b.now()
	var plan tierPlan
	var sizes map[uint64]int64
	var replicas map[uint64][]string
	var evicted []uint64
	var garbage map[uint64]string
	b.fsm.View(func(s *meta.State) {
		plan = planTier(s, t.cfg.TierDefaults, now.UnixNano())
		sizes = make(map[uint64]int64, len(plan.upload))
		replicas = make(map[uint64][]string, len(plan.upload))
		for _, id := range plan.upload {
			o := s.Objects[id]
			sizes[id], replicas[id] = o.Size, slices.Clone(o.Replicas)
		}
		for id, o := range s.Objects {
			if o.Evicted {
				evicted = append(evicted, id)
			}
		}
		garbage = make(map[uint64]string, len(s.TieredGarbage))
		for id, k := range s.TieredGarbage {
			garbage[id] = k
		}
	})
	b.dropEvicted(evicted)
	b.uploadDue(ctx, plan.upload, sizes, replicas, now)
	var tiered int64
	b.fsm.View(func(s *meta.State) {
		for _, o := range s.Objects {
			if o.Tier != nil {
				tiered += o.Tier.Size
			}
		}
	})
	b.cfg.Metrics.TierBytes.Set(float64(tiered))
	if reachable, _, _ := t.cfg.Health.Snapshot(); reachable {
		b.cfg.Metrics.TierReachable.Set(1)
	} else {
		b.cfg.Metrics.TierReachable.Set(0)
	}
	if !b.log.IsLeader() {
		return
	}
	if len(plan.evict) > 0 && b.needLevel(meta.LevelTier, meta.OpEvict) == nil {
		const most = 1000 // a bounded command; the next pass takes the rest
		ids := plan.evict[:min(len(plan.evict), most)]
		if _, err := b.apply(ctx, &meta.Command{Op: meta.OpEvict, Evict: &meta.Evict{Objects: ids}}); err != nil {
			b.cfg.Logger.Warn("evicting uploaded segments failed", "err", err)
		} else {
			b.cfg.Metrics.TierEvicted.Add(float64(len(ids)))
		}
	}
	b.deleteTieredGarbage(ctx, garbage)
	if time.Since(t.lastScan) >= max(min(t.cfg.OrphanGrace/4, 10*time.Minute), t.cfg.Interval) {
		t.lastScan = time.Now()
		b.collectTierOrphans(ctx)
	}
}

// dropEvicted deletes this member's copies of evicted objects. A read
// that looked one up just before finds the file gone and looks again:
// the object is then read from object storage (frame).
func (b *Broker) dropEvicted(ids []uint64) {
	t := b.tiering
	dropped := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		if t.dropped[id] || !b.objs.HasFile(id) {
			dropped[id] = true
			continue
		}
		b.frames.dropObject(id)
		if err := b.objs.Remove(id); err != nil {
			b.cfg.Logger.Warn("removing an evicted segment failed", "object", id, "err", err)
			continue
		}
		dropped[id] = true
		b.cfg.Metrics.TierLocalRemoved.Inc()
	}
	t.dropped = dropped // only the tier loop touches it
}

// uploadDue uploads the segments this member is due to: it holds a copy,
// and every replica before it in the set had UploadStagger each to do it.
// One at a time, oldest id first; a failure backs the loop off
// (exponentially, to a minute) and leaves the local copies as they are.
func (b *Broker) uploadDue(ctx context.Context, ids []uint64, sizes map[uint64]int64, replicas map[uint64][]string, now time.Time) {
	t := b.tiering
	t.mu.Lock()
	live := make(map[uint64]time.Time, len(ids))
	var due []uint64
	for _, id := range ids {
		if !b.objs.HasFile(id) {
			continue
		}
		first, ok := t.seen[id]
		if !ok {
			first = now
		}
		live[id] = first
		rank := slices.Index(replicas[id], b.self())
		if rank < 0 {
			rank = 0 // a lone broker's, or inline: every member holds it
		}
		if now.Sub(first) >= time.Duration(rank)*t.cfg.UploadStagger {
			due = append(due, id)
		}
	}
	t.seen = live
	t.pending = len(due)
	wait := now.Before(t.retryAt)
	t.mu.Unlock()
	b.cfg.Metrics.TierUploadsPending.Set(float64(len(due)))
	if wait || len(due) == 0 || b.needLevel(meta.LevelTier, meta.OpTiered) != nil {
		return
	}
	for i, id := range due {
		if ctx.Err() != nil {
			return
		}
		err := b.upload(ctx, id, sizes[id])
		t.mu.Lock()
		if err != nil {
			t.failed++
			t.backoff = min(max(2*t.backoff, time.Second), time.Minute)
			t.retryAt = time.Now().Add(t.backoff)
			t.mu.Unlock()
			b.cfg.Metrics.TierUploads.WithLabelValues("failed").Inc()
			b.cfg.Logger.Warn("uploading a segment failed; its local copies stay", "object", id, "retryIn", t.backoff, "err", err)
			return
		}
		t.backoff = 0
		t.pending = len(due) - i - 1
		t.mu.Unlock()
		b.cfg.Metrics.TierUploads.WithLabelValues("ok").Inc()
		b.cfg.Metrics.TierUploadsPending.Set(float64(len(due) - i - 1))
	}
}

// upload sends one segment, confirms it, and records it in the log.
func (b *Broker) upload(ctx context.Context, id uint64, size int64) error {
	t := b.tiering
	f, fsize, err := b.objs.OpenObject(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // collected or moved meanwhile: the next pass sees
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if fsize != size {
		return fmt.Errorf("segment %d: the file holds %d bytes, the log says %d", id, fsize, size)
	}
	// Checked before it leaves: a copy that fails its frames here would
	// be uploaded as good, and once evicted be the only one. The MD5 the
	// bucket checks is made in the same pass, of the bytes that checked:
	// the file is its header and its frames, nothing else (a nil error
	// from Scan says so).
	h := md5.New()
	h.Write(objstore.AppendHeader(nil, id))
	var fh []byte
	end, err := b.objs.Scan(id, func(_, _ int64, payload []byte) error {
		fh = objstore.AppendFrameHeader(fh[:0], payload)
		h.Write(fh)
		h.Write(payload)
		return nil
	})
	if err != nil || end != size {
		return fmt.Errorf("segment %d failed its checks before upload (%d of %d bytes good): %v", id, end, size, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	key := t.cfg.Keys.Segment(id)
	uctx, cancel := context.WithTimeout(ctx, t.cfg.UploadTimeout)
	defer cancel()
	start := time.Now()
	var body io.Reader = f
	if t.limit != nil {
		body = &limitedReader{ctx: uctx, r: f, limit: t.limit}
	}
	if err := t.cfg.Bucket.Put(uctx, key, body, size, sum); err != nil {
		return err
	}
	if time.Since(start) > t.cfg.OrphanGrace/2 {
		// The leader's scan may take the key for an orphan before the
		// command lands: send it again next pass.
		return fmt.Errorf("segment %d: the upload took %s, more than half the orphan grace", id, time.Since(start))
	}
	_, err = b.apply(ctx, &meta.Command{Op: meta.OpTiered, Tiered: &meta.Tiered{Object: id, Key: key, Size: size, MD5: sum}})
	if errors.Is(err, node.ObjectGone) {
		// Merged, trimmed or deleted while it uploaded: nothing names the
		// key, so it goes now (else the orphan scan takes it).
		dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
		_ = t.cfg.Bucket.Delete(dctx, key)
		dcancel()
		return nil
	}
	if err != nil {
		return err
	}
	b.cfg.Metrics.TierUploadedBytes.Add(float64(size))
	return nil
}

// deleteTieredGarbage deletes the keys of garbage objects (the leader):
// collectGarbage forgets an object only once its key is gone.
func (b *Broker) deleteTieredGarbage(ctx context.Context, garbage map[uint64]string) {
	t := b.tiering
	now := time.Now()
	t.mu.Lock()
	since := make(map[uint64]time.Time, len(garbage))
	for id := range garbage {
		at, ok := t.garbageSince[id]
		if !ok {
			at = now
		}
		since[id] = at
	}
	t.garbageSince = since
	t.mu.Unlock()
	for id, key := range garbage {
		t.mu.Lock()
		done := t.keysDeleted[id]
		t.mu.Unlock()
		if done || now.Sub(since[id]) < b.cfg.GarbageGrace {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := t.cfg.Bucket.Delete(dctx, key)
		cancel()
		if err != nil {
			b.cfg.Logger.Warn("deleting a garbage segment from object storage failed; it is tried again", "object", id, "key", key, "err", err)
			return
		}
		t.mu.Lock()
		t.keysDeleted[id] = true
		t.mu.Unlock()
		b.cfg.Metrics.TierDeleted.Inc()
	}
}

// tierKeyDeleted says whether garbage object id may be forgotten: it was
// never tiered, or the leader deleted its key.
func (b *Broker) tierKeyDeleted(s *meta.State, id uint64) bool {
	if _, tiered := s.TieredGarbage[id]; !tiered {
		return true
	}
	if b.tiering == nil {
		return false // configured off: the key stays until it is on again
	}
	b.tiering.mu.Lock()
	defer b.tiering.mu.Unlock()
	return b.tiering.keysDeleted[id]
}

// forgetDeleted drops what ObjectsDeleted made moot.
func (b *Broker) forgetDeleted(ids []uint64) {
	if b.tiering == nil {
		return
	}
	b.tiering.mu.Lock()
	for _, id := range ids {
		delete(b.tiering.keysDeleted, id)
	}
	b.tiering.mu.Unlock()
}

// collectTierOrphans deletes keys of objects that are no longer live, once
// older than the orphan grace: uploads whose Tiered never landed before the
// object was collected (the uploader died, or the object was merged,
// trimmed or deleted meanwhile). A collected object never comes back, so
// no upload can be recorded under its key after the scan decided.
func (b *Broker) collectTierOrphans(ctx context.Context) {
	t := b.tiering
	cutoff := time.Now().Add(-t.cfg.OrphanGrace)
	var orphans []string
	err := t.cfg.Bucket.List(ctx, t.cfg.Keys.Segments(), func(key string, _ int64, modified time.Time) error {
		id, ok := t.cfg.Keys.ParseSegment(key)
		if !ok || modified.After(cutoff) {
			return nil
		}
		// A live object's key is never an orphan, tiered or not: an
		// upload whose confirmation failed is sent again and recorded
		// (same key), and deleting it meanwhile could lose it. Only a
		// collected object's key is, as no Tiered can name it any more.
		named := false
		b.fsm.View(func(s *meta.State) {
			_, live := s.Objects[id]
			_, pending := s.TieredGarbage[id] // deleteTieredGarbage's
			named = live || pending
		})
		if !named {
			orphans = append(orphans, key)
		}
		return nil
	})
	if err != nil {
		b.cfg.Logger.Warn("listing object storage for orphans failed", "err", err)
		return
	}
	for _, key := range orphans {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := t.cfg.Bucket.Delete(dctx, key)
		cancel()
		if err != nil {
			b.cfg.Logger.Warn("deleting an orphaned key failed", "key", key, "err", err)
			return
		}
		b.cfg.Metrics.TierOrphansDeleted.Inc()
		b.cfg.Logger.Info("deleted an uploaded segment no object names", "key", key)
	}
}

// tierFrame reads a range's frame from object storage, checked as a local
// read is.
func (b *Broker) tierFrame(r meta.Range, tc *meta.TierCopy) ([]byte, error) {
	t := b.tiering
	if t == nil {
		return nil, tier.Unreachable.With("op", "get", "key", tc.Key, "err", "object storage is not configured on this broker")
	}
	var payload []byte
	_, err := t.cfg.Reader.Read(context.Background(), tc.Key, tc.Size, r.Pos, r.Len, func(buf []byte) error {
		p, err := objstore.CheckFrame(r.Object, r.Pos, buf)
		payload = p
		return err
	})
	if errors.Is(err, tier.NotFound) {
		// Collected since the lookup (its key goes GarbageGrace after it
		// became garbage): the reader looks its ranges up again, as for a
		// local file (lookAgainIfCollected).
		return nil, fmt.Errorf("%w (%w)", err, fs.ErrNotExist)
	}
	if err != nil {
		return nil, err
	}
	return payload, nil
}

// limitedReader paces reads through a limiter: the upload's bytes are
// read (and sent) no faster than it allows.
type limitedReader struct {
	ctx   context.Context
	r     io.Reader
	limit *rate.Limiter
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if burst := l.limit.Burst(); len(p) > burst {
		p = p[:burst]
	}
	n, err := l.r.Read(p)
	if n > 0 {
		if werr := l.limit.WaitN(l.ctx, n); werr != nil && err == nil {
			err = werr
		}
	}
	return n, err
}
