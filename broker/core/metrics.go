package core

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the broker's Prometheus measurements.
type Metrics struct {
	Appends        prometheus.Counter
	AppendBytes    prometheus.Counter
	FlushAppends   prometheus.Histogram
	FlushBytes     prometheus.Histogram
	FsyncSeconds   prometheus.Histogram
	InlineObjects  prometheus.Counter
	HeldBytes      prometheus.Gauge
	HeldSpilled    prometheus.Counter
	WALUnzeroed    prometheus.Counter
	CommitSeconds  prometheus.Histogram
	Rollbacks      prometheus.Counter
	CorruptReads   prometheus.Counter
	TrimmedRanges  prometheus.Counter
	MergedRanges   prometheus.Counter
	ObjectsDeleted prometheus.Counter
	ExpiredStreams prometheus.Counter

	MetadataCommands       *prometheus.CounterVec // by op
	Checkpoints            prometheus.Counter
	CheckpointCommits      prometheus.Histogram
	CheckpointRefused      prometheus.Counter
	JournalSegmentsDropped prometheus.Counter
	JournalSyncs           prometheus.Counter
	UncheckpointedBytes    prometheus.Gauge

	TierUploads        *prometheus.CounterVec
	TierUploadedBytes  prometheus.Counter
	TierUploadsPending prometheus.Gauge
	TierBytes          prometheus.Gauge
	TierEvicted        prometheus.Counter
	TierLocalRemoved   prometheus.Counter
	TierDeleted        prometheus.Counter
	TierOrphansDeleted prometheus.Counter
	TierReachable      prometheus.Gauge
}

// NewMetrics creates the broker's metrics and registers them with reg (nil:
// unregistered, for tests and embedded use).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	latency := prometheus.ExponentialBuckets(50e-6, 2, 16) // 50µs .. ~1.6s
	m := &Metrics{
		Appends:        prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_appends_total", Help: "Acknowledged appends (batches)."}),
		AppendBytes:    prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_append_bytes_total", Help: "Key and payload bytes of acknowledged appends."}),
		FlushAppends:   prometheus.NewHistogram(prometheus.HistogramOpts{Name: "picomq_flush_appends", Help: "Appends per group-commit object.", Buckets: prometheus.ExponentialBuckets(1, 2, 14)}),
		FlushBytes:     prometheus.NewHistogram(prometheus.HistogramOpts{Name: "picomq_flush_bytes", Help: "Payload bytes per group-commit object.", Buckets: prometheus.ExponentialBuckets(1024, 4, 10)}),
		FsyncSeconds:   prometheus.NewHistogram(prometheus.HistogramOpts{Name: "picomq_object_fsync_seconds", Help: "Write and fdatasync of one object.", Buckets: latency}),
		InlineObjects:  prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_inline_objects_total", Help: "Group-commit objects whose frames were made durable by their commit in the metadata log, without an fdatasync of their own."}),
		HeldBytes:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "picomq_held_object_bytes", Help: "Frame bytes of inline-committed objects held in memory, not yet merged or written to files (measured each maintenance pass)."}),
		HeldSpilled:    prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_held_objects_spilled_total", Help: "Inline-committed objects written to their own files because the merge had not freed them in time, too many bytes were held, or a snapshot needed them."}),
		WALUnzeroed:    prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_wal_segments_unzeroed_total", Help: "Metadata-log segments created before a zeroed spare was ready; commits into them cost a second device write (measured each maintenance pass)."}),
		CommitSeconds:  prometheus.NewHistogram(prometheus.HistogramOpts{Name: "picomq_metadata_commit_seconds", Help: "Proposal to application of one metadata command.", Buckets: latency}),
		Rollbacks:      prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_rollbacks_total", Help: "Provisional state reset after an append was refused (by the metadata log, or the journal)."}),
		CorruptReads:   prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_corrupt_reads_total", Help: "Reads refused because a committed frame failed its checksum."}),
		TrimmedRanges:  prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_retention_trims_total", Help: "Trims made by retention."}),
		MergedRanges:   prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_merged_ranges_total", Help: "Small ranges rewritten into segments."}),
		ObjectsDeleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_objects_deleted_total", Help: "Object files deleted (garbage and orphans)."}),
		ExpiredStreams: prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_expired_streams_total", Help: "Streams deleted by their TTL or expiry."}),

		MetadataCommands:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picomq_metadata_commands_total", Help: "Commands this broker's metadata log applied (a replay at start included), by op: what fills the log (checkpoint, replaceMany for a pass's merges, ...)."}, []string{"op"}),
		Checkpoints:            prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_checkpoints_total", Help: "Checkpoints: one metadata command taking the group commits the journal acknowledged since the last."}),
		CheckpointCommits:      prometheus.NewHistogram(prometheus.HistogramOpts{Name: "picomq_checkpoint_commits", Help: "Group commits per checkpoint.", Buckets: prometheus.ExponentialBuckets(1, 2, 16)}),
		CheckpointRefused:      prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_checkpoint_refused_appends_total", Help: "Acknowledged appends a checkpoint's state machine refused (other than for a stream deleted since): should stay 0."}),
		JournalSegmentsDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_journal_segments_dropped_total", Help: "Journal segments dropped once every object in them was checkpointed and unreferenced or in its own synced file."}),
		JournalSyncs:           prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_journal_fsyncs_total", Help: "fdatasyncs of the journal's batches (each covers every object and fence that arrived together: this broker's and its peers')."}),
		UncheckpointedBytes:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "picomq_uncheckpointed_bytes", Help: "Record bytes the journal acknowledged that no checkpoint holds yet (measured each maintenance pass)."}),

		TierUploads:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picomq_tier_uploads_total", Help: "Segment uploads to object storage by this broker, by result (ok: confirmed and recorded; failed: retried later, local copies kept)."}, []string{"result"}),
		TierUploadedBytes:  prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_tier_uploaded_bytes_total", Help: "Bytes of segments this broker uploaded and recorded."}),
		TierUploadsPending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "picomq_tier_uploads_pending", Help: "Sealed segments this broker is due to upload and has not yet."}),
		TierBytes:          prometheus.NewGauge(prometheus.GaugeOpts{Name: "picomq_tier_bytes", Help: "Bytes of the cluster's segments held in object storage (from the metadata log)."}),
		TierEvicted:        prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_tier_evictions_total", Help: "Uploaded segments whose local copies the metadata leader released (past their local retention)."}),
		TierLocalRemoved:   prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_tier_local_removed_total", Help: "Local copies of evicted segments this broker deleted."}),
		TierDeleted:        prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_tier_deleted_total", Help: "Keys of garbage segments the metadata leader deleted from object storage (retention, merges, compaction, stream deletion)."}),
		TierOrphansDeleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_tier_orphans_deleted_total", Help: "Keys in object storage no object named (an upload never recorded) that the metadata leader deleted after the orphan grace."}),
		TierReachable:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "picomq_tier_reachable", Help: "1 while object storage answered this broker's last request, 0 after a failure (measured each tier pass)."}),
	}
	if reg != nil {
		reg.MustRegister(m.Appends, m.AppendBytes, m.FlushAppends, m.FlushBytes, m.FsyncSeconds, m.InlineObjects, m.HeldBytes, m.HeldSpilled, m.WALUnzeroed, m.CommitSeconds,
			m.Rollbacks, m.CorruptReads, m.TrimmedRanges, m.MergedRanges, m.ObjectsDeleted, m.ExpiredStreams,
			m.MetadataCommands, m.Checkpoints, m.CheckpointCommits, m.CheckpointRefused, m.JournalSegmentsDropped, m.JournalSyncs, m.UncheckpointedBytes,
			m.TierUploads, m.TierUploadedBytes, m.TierUploadsPending, m.TierBytes, m.TierEvicted, m.TierLocalRemoved, m.TierDeleted, m.TierOrphansDeleted, m.TierReachable)
	}
	return m
}

func (m *Metrics) observeCommit(d time.Duration) { m.CommitSeconds.Observe(d.Seconds()) }
