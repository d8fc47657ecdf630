package resources

import (
	"fmt"
	"time"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/broker/stream"
)

// PolicyValue converts a custom resource's policy into the broker's. The
// CRD already refused malformed and negative durations; a client that
// bypassed it gets the parse error, naming the field.
func PolicyValue(p streamsv1alpha1.StreamPolicy) (stream.PolicyValue, error) {
	v := stream.PolicyValue{
		Partitions:       int(p.Partitions),
		MaxRecordBytes:   int(p.MaxRecordBytes),
		RetainBytes:      p.RetainBytes,
		MaxBytes:         p.MaxBytes,
		SegmentBytes:     p.SegmentBytes,
		Tiering:          string(p.Tiering),
		LocalRetainBytes: p.LocalRetainBytes,
	}
	var err error
	if v.RetainFor, err = optionalDuration("retainFor", p.RetainFor); err != nil {
		return v, err
	}
	if v.BlockTimeout, err = optionalDuration("blockTimeout", p.BlockTimeout); err != nil {
		return v, err
	}
	if v.CompactAfter, err = optionalDuration("compactAfter", p.CompactAfter); err != nil {
		return v, err
	}
	if v.LocalRetainFor, err = optionalDuration("localRetainFor", p.LocalRetainFor); err != nil {
		return v, err
	}
	return v, nil
}

func optionalDuration(field string, d *streamsv1alpha1.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	v, err := d.Parse()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", field, err)
	}
	return v.Duration, nil
}
