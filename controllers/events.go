package controllers

import (
	"fmt"
	"unicode/utf8"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// EventSource is the reporting controller of the operator's events.
const EventSource = "picomq-operator"

// Event types, as Kubernetes spells them.
const (
	eventNormal  = "Normal"
	eventWarning = "Warning"
)

// maxNote is the longest note an events.k8s.io Event may carry (1 kB),
// with room for the ellipsis.
const maxNote = 1000

// event records an event about obj; a nil recorder records nothing. The
// note is cut to what the Events API accepts.
func event(rec events.EventRecorder, obj runtime.Object, typ, reason, action, note string, args ...any) {
	eventAbout(rec, obj, nil, typ, reason, action, note, args...)
}

// eventAbout records an event about obj that concerns related (a child
// object, say), or nothing (nil).
//
// The events API folds events with the same type, reason, action,
// reporting controller, regarding object and related object into one
// Event whose series counts them, keeping the first note: "created
// ServiceAccount demo-broker (x8)" hid "created Role", "created
// StatefulSet"... The related object tells them apart, so every action on
// a child is an Event of its own (and links to the child).
func eventAbout(rec events.EventRecorder, obj, related runtime.Object, typ, reason, action, note string, args ...any) {
	if rec == nil {
		return
	}
	rec.Eventf(obj, related, typ, reason, action, "%s", truncate(fmt.Sprintf(note, args...), maxNote))
}

// truncate cuts s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// rateLimiter is the controllers' retry policy after a failed reconcile:
// per object, exponential from ErrorBackoffBase to ErrorBackoffMax (a broker
// that does not answer is not asked again in a hot loop), and overall at
// most 10 retries a second with bursts of 100.
func rateLimiter(o Options) workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](o.ErrorBackoffBase, o.ErrorBackoffMax),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}
