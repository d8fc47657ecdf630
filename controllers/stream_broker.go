package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/controllers/brokeradmin"
	"github.com/picomq/picomq/controllers/resources"
)

// syncOutcome is what one sync with the broker found and did.
type syncOutcome struct {
	// ready is the Ready condition to write.
	ready metav1.Condition
	// info is the broker's stream after the sync (nil: unknown).
	info *client.StreamInfo
	// retry, when set, is returned to the controller so that the object is
	// retried with backoff.
	retry error
	// created: the stream was created; recreated: it had been created
	// before and was found deleted out of band.
	created, recreated bool
	// updated lists the policy fields changed on the broker; drift says the
	// broker's policy was not the one the operator had applied (so someone
	// changed it there).
	updated []string
	drift   bool
	// applied, when set, is the policy the broker's stream now has, as
	// status records it: the sync made the stream what the spec asks.
	applied string
}

// desiredConfig is the broker configuration a Stream asks for.
func desiredConfig(s *streamsv1alpha1.Stream) (client.StreamConfig, error) {
	policy, err := resources.PolicyValue(s.Spec.StreamPolicy)
	if err != nil {
		return client.StreamConfig{}, err
	}
	if err := policy.Validate(); err != nil {
		return client.StreamConfig{}, err
	}
	cfg := client.StreamConfig{ContentType: s.Spec.EffectiveContentType(), Policy: policy}
	if s.Spec.TTL != nil {
		d, err := s.Spec.TTL.Parse()
		if err != nil {
			return cfg, fmt.Errorf("ttl: %w", err)
		}
		cfg.TTL = d.Duration
	}
	if s.Spec.ExpiresAt != nil {
		cfg.ExpiresAt = s.Spec.ExpiresAt.Time
	}
	return cfg, nil
}

// sync makes the broker's stream what s asks for: created when missing
// (recreated, with a warning, when it had existed), its policy updated when
// it differs (a spec change, or drift), refused in status when it cannot
// become what s asks without losing data (Conflict).
func (r *StreamReconciler) sync(ctx context.Context, s *streamsv1alpha1.Stream, c *streamsv1alpha1.StreamCluster) syncOutcome {
	name := s.StreamName()
	if err := streamsv1alpha1.ValidateStreamName(name); err != nil {
		return syncOutcome{ready: invalidSpec(err)}
	}
	cfg, err := desiredConfig(s)
	if err != nil {
		return syncOutcome{ready: invalidSpec(err)}
	}
	if s.Spec.Tiering == streamsv1alpha1.TieringEnabled && c.Spec.TieredStorage == nil {
		// Asked of a broker with no object storage, the policy would be
		// accepted and do nothing: say so, and change nothing.
		return syncOutcome{ready: tieringNotConfigured(s, c)}
	}
	endpoint := adminEndpoint(s, c)
	admin, err := r.streamAdmin(ctx, endpoint, c)
	if err != nil {
		return syncOutcome{ready: brokerError(c, endpoint, "connect", err)}
	}
	applied := appliedPolicy(cfg.Policy)
	ctx, cancel := context.WithTimeout(ctx, r.Options.BrokerCallTimeout)
	defer cancel()

	var out syncOutcome
	info, err := admin.GetStream(ctx, name)
	switch {
	case brokeradmin.IsNotFound(err):
		out.recreated = len(s.Status.Partitions) > 0
		if out.recreated {
			if why := expired(s, time.Now()); why != "" {
				// The broker deleted it as asked: recreating it would undo
				// the lifetime the spec set.
				return syncOutcome{ready: metav1.Condition{Status: metav1.ConditionFalse, Reason: streamsv1alpha1.ReasonExpired, Message: why}}
			}
		}
		info, _, err = admin.CreateStream(ctx, name, cfg)
		if err != nil {
			return r.brokerFailure(s, c, endpoint, "create", err)
		}
		out.created = !out.recreated
	case err != nil:
		return r.brokerFailure(s, c, endpoint, "get", err)
	default:
		if why := conflictWith(name, cfg, info); why != "" {
			return syncOutcome{ready: conflict(why), info: &info}
		}
		if diff := policyDiff(info.Policy, cfg.Policy); len(diff) > 0 {
			// Drift is a broker policy other than the one the operator
			// last applied: someone changed it there. A policy that is
			// what was applied and differs from the spec is the user's
			// change, however many reconciles failed in between.
			drift := s.Status.AppliedPolicy != "" && s.Status.AppliedPolicy != appliedPolicy(info.Policy)
			info, err = admin.UpdatePolicy(ctx, name, cfg.Policy)
			if err != nil {
				return r.brokerFailure(s, c, endpoint, "update", err)
			}
			out.updated, out.drift = diff, drift
		}
	}
	out.info = &info
	out.ready = streamReady(s, c, info, out.recreated)
	out.applied = applied
	return out
}

// appliedPolicy is how status records a policy: the admin API's JSON of it
// normalized (a zero maxRecordBytes and 1 MiB are one policy).
func appliedPolicy(p stream.PolicyValue) string {
	raw, err := json.Marshal(wire.PolicyOf(p.Normalized()))
	if err != nil {
		return "" // a policy of numbers and strings always marshals
	}
	return string(raw)
}

// expired says why a Stream whose broker stream is gone has reached the
// end of the lifetime its unchanged spec gave it (expiresAt passed, or no
// use for ttl since the last look), or "" when it has not: then someone
// deleted it.
func expired(s *streamsv1alpha1.Stream, now time.Time) string {
	if s.Status.ObservedGeneration != s.Generation {
		return "" // a new spec: a new stream is asked for
	}
	switch {
	case s.Spec.ExpiresAt != nil && !now.Before(s.Spec.ExpiresAt.Time):
		return fmt.Sprintf("stream %s expired at %s (spec.expiresAt) and the broker deleted it; change the spec to create it again, or delete this resource",
			s.StreamName(), s.Spec.ExpiresAt.UTC().Format(time.RFC3339))
	case s.Spec.TTL != nil && s.Status.ExpiresAt != nil && !now.Before(s.Status.ExpiresAt.Time):
		return fmt.Sprintf("stream %s went unused for its ttl (%s) and the broker deleted it around %s; change the spec to create it again, or delete this resource",
			s.StreamName(), *s.Spec.TTL, s.Status.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return ""
}

// brokerFailure turns a failed admin call into the Ready condition: a
// refusal that waiting cannot fix (the stream exists with another
// configuration, partitions would shrink, the broker refuses the policy) is
// written and not retried until something changes; anything else (the
// brokers unreachable, not ready, failing) is retried with backoff.
func (r *StreamReconciler) brokerFailure(s *streamsv1alpha1.Stream, c *streamsv1alpha1.StreamCluster, endpoint, op string, err error) syncOutcome {
	switch code := brokeradmin.ErrorCode(err); code {
	case brokeradmin.CodeStreamExists, brokeradmin.CodePartitionsShrink:
		return syncOutcome{ready: conflict(fmt.Sprintf("the broker refused to %s stream %s: %v", op, s.StreamName(), err))}
	case brokeradmin.CodeStreamMisconfigured:
		return syncOutcome{ready: brokerError(c, endpoint, op, err)}
	}
	retry := fmt.Errorf("%s stream %s on cluster %s: %w", op, s.StreamName(), c.Name, err)
	switch {
	case brokeradmin.IsUnreachable(err) && !meta.IsStatusConditionTrue(c.Status.Conditions, streamsv1alpha1.ConditionReady):
		return syncOutcome{ready: clusterNotReady(c, endpoint, err), retry: retry}
	case brokeradmin.IsUnreachable(err):
		return syncOutcome{ready: brokerUnreachable(c, endpoint, op, err), retry: retry}
	}
	return syncOutcome{ready: brokerError(c, endpoint, op, err), retry: retry}
}

// conflictWith says why the broker's stream cannot become what cfg asks
// without losing data or breaking its readers, or "".
func conflictWith(name string, cfg client.StreamConfig, info client.StreamInfo) string {
	want := cfg.Policy.Normalized()
	switch {
	case info.ContentType != cfg.ContentType:
		return fmt.Sprintf("stream %s exists on the broker with content type %q, not %q: a stream's content type never changes (its records carry it); delete it on the broker or change spec.contentType",
			name, info.ContentType, cfg.ContentType)
	case info.PartitionCount > want.Partitions:
		return fmt.Sprintf("stream %s has %d partitions on the broker, more than the %d asked: partitions never shrink", name, info.PartitionCount, want.Partitions)
	case info.TTL != cfg.TTL:
		return fmt.Sprintf("stream %s has ttl %s on the broker, not %s: the admin API cannot change a stream's lifetime; recreate the stream to change it",
			name, durationOrNone(info.TTL.String(), info.TTL == 0), durationOrNone(cfg.TTL.String(), cfg.TTL == 0))
	case !info.ExpiresAt.Equal(cfg.ExpiresAt):
		return fmt.Sprintf("stream %s expires at %s on the broker, not %s: the admin API cannot change a stream's lifetime; recreate the stream to change it",
			name, timeOrNone(info.ExpiresAt), timeOrNone(cfg.ExpiresAt))
	}
	return ""
}

func durationOrNone(s string, none bool) string {
	if none {
		return "none"
	}
	return s
}

// policyDiff names the fields in which two policies differ, once both are
// normalized (a zero MaxRecordBytes and 1 MiB are the same policy).
func policyDiff(have, want stream.PolicyValue) []string {
	h, w := have.Normalized(), want.Normalized()
	var d []string
	add := func(field string, differ bool, hv, wv any) {
		if differ {
			d = append(d, fmt.Sprintf("%s %v→%v", field, hv, wv))
		}
	}
	add("partitions", h.Partitions != w.Partitions, h.Partitions, w.Partitions)
	add("maxRecordBytes", h.MaxRecordBytes != w.MaxRecordBytes, h.MaxRecordBytes, w.MaxRecordBytes)
	add("retainFor", h.RetainFor != w.RetainFor, h.RetainFor, w.RetainFor)
	add("retainBytes", h.RetainBytes != w.RetainBytes, h.RetainBytes, w.RetainBytes)
	add("maxBytes", h.MaxBytes != w.MaxBytes, h.MaxBytes, w.MaxBytes)
	add("blockTimeout", h.BlockTimeout != w.BlockTimeout, h.BlockTimeout, w.BlockTimeout)
	add("segmentBytes", h.SegmentBytes != w.SegmentBytes, h.SegmentBytes, w.SegmentBytes)
	add("compactAfter", h.CompactAfter != w.CompactAfter, h.CompactAfter, w.CompactAfter)
	add("tiering", h.Tiering != w.Tiering, orFollow(h.Tiering), orFollow(w.Tiering))
	add("localRetainFor", h.LocalRetainFor != w.LocalRetainFor, h.LocalRetainFor, w.LocalRetainFor)
	add("localRetainBytes", h.LocalRetainBytes != w.LocalRetainBytes, h.LocalRetainBytes, w.LocalRetainBytes)
	return d
}

// orFollow words an empty tiering for events.
func orFollow(t string) string {
	if t == "" {
		return "(cluster's)"
	}
	return t
}

// actionEvents records what the sync did on the broker.
func (r *StreamReconciler) actionEvents(s *streamsv1alpha1.Stream, out syncOutcome) {
	switch {
	case out.recreated:
		event(r.Recorder, s, eventWarning, "Recreated", "Create",
			"stream %s was deleted on the broker outside the operator: recreated it empty; its offsets restart at 0", s.StreamName())
	case out.created:
		parts := 1
		if out.info != nil {
			parts = out.info.PartitionCount
		}
		event(r.Recorder, s, eventNormal, "Created", "Create", "created stream %s with %d %s", s.StreamName(), parts, plural(parts, "partition", "partitions"))
	}
	if len(out.updated) > 0 {
		if out.drift {
			event(r.Recorder, s, eventWarning, "PolicyDriftRepaired", "Update",
				"the policy of stream %s had been changed on the broker: set back %s", s.StreamName(), strings.Join(out.updated, ", "))
		} else {
			event(r.Recorder, s, eventNormal, "Updated", "Update", "updated stream %s: %s", s.StreamName(), strings.Join(out.updated, ", "))
		}
	}
}

// readyTransitionEvent records a Warning when the Ready reason changed to
// a failure, once that status is written: a failure that persists, or two
// reconciles racing on a stale cache, record nothing more.
func (r *StreamReconciler) readyTransitionEvent(s *streamsv1alpha1.Stream, old, now *streamsv1alpha1.StreamStatus) {
	was := meta.FindStatusCondition(old.Conditions, streamsv1alpha1.ConditionReady)
	cur := meta.FindStatusCondition(now.Conditions, streamsv1alpha1.ConditionReady)
	if cur == nil || cur.Status == metav1.ConditionTrue || cur.Reason == streamsv1alpha1.ReasonUnmanaged || (was != nil && was.Reason == cur.Reason) {
		return
	}
	event(r.Recorder, s, eventWarning, cur.Reason, "Sync", "%s", cur.Message)
}
