package main

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/settings"
	"github.com/picomq/picomq/broker/tier"
)

// tierConfig builds object storage from the settings (nil when off). It
// sends nothing: the tier loop probes the bucket once the broker runs, so
// a bucket that is down at start delays uploads, never the broker.
func tierConfig(t settings.Tier, dataDir string, reg prometheus.Registerer, logger *slog.Logger) (*core.TierConfig, error) {
	if t.Endpoint == "" {
		return nil, nil
	}
	health := &tier.Health{}
	bucket, err := tier.NewS3(tier.Options{
		Endpoint: t.Endpoint, Bucket: t.Bucket, Region: t.Region, PathStyle: t.PathStyle,
		CAFile: t.CAFile, CredentialsDir: t.CredentialsDir, Health: health,
	})
	if err != nil {
		return nil, fmt.Errorf("object storage: %w", err)
	}
	m := tier.NewMetrics(reg)
	dir := t.CacheDir
	if dir == "" {
		dir = filepath.Join(dataDir, "tier-cache")
	}
	cache, err := tier.OpenCache(dir, t.CacheBytes, m)
	if err != nil {
		return nil, fmt.Errorf("tier cache %s: %w", dir, err)
	}
	logger.Info("tiered storage on", "endpoint", t.Endpoint, "bucket", t.Bucket, "prefix", t.Prefix, "cacheBytes", t.CacheBytes, "localRetainFor", t.LocalRetainFor, "localRetainBytes", t.LocalRetainBytes)
	return &core.TierConfig{
		Bucket: bucket,
		Reader: tier.NewReader(bucket, cache, tier.ReaderOptions{Prefetch: t.Prefetch, Metrics: m}),
		Keys:   tier.Keys{Prefix: t.Prefix},
		Health: health,
		TierDefaults: core.TierDefaults{
			LocalRetainFor: t.LocalRetainFor, LocalRetainBytes: t.LocalRetainBytes,
		},
		UploadStagger:        t.UploadStagger,
		OrphanGrace:          t.OrphanGrace,
		UploadBytesPerSecond: t.UploadBytesPerSecond,
	}, nil
}

// tierStatus is GET /v1/admin/tier's answer.
func tierStatus(b *core.Broker) func() wire.TierStatus {
	return func() wire.TierStatus {
		st := b.TierStatus()
		out := wire.TierStatus{
			Enabled: st.Enabled, Endpoint: st.Endpoint, Bucket: st.Bucket, Prefix: st.Prefix, Reachable: st.Reachable,
			UploadsPending: st.UploadsPending, UploadsFailed: st.UploadsFailed, TieredBytes: st.TieredBytes,
		}
		if !st.LastSuccess.IsZero() {
			at := st.LastSuccess.UTC().Truncate(time.Millisecond)
			out.LastSuccess = &at
		}
		if st.LastError != nil {
			code := "TIER_UNREACHABLE"
			if e, ok := errs.As(st.LastError); ok {
				code = e.Name()
			}
			out.LastError = &wire.TierError{Code: code, Message: st.LastError.Error()}
		}
		return out
	}
}
