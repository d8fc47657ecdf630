package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/controllers/brokeradmin"
	"github.com/picomq/picomq/controllers/resources"
)

// brokerObservation is one broker's answer to the node status call.
type brokerObservation struct {
	pod    string
	status brokeradmin.NodeStatus
	err    error
	// tier is the broker's view of the object storage, asked only of a
	// broker that answered, of a cluster with spec.tieredStorage (nil:
	// not asked, or not answered).
	tier *wire.TierStatus
}

// scalePlan is the replica count the StatefulSet gets, and why.
type scalePlan struct {
	// replicas is applied to the StatefulSet.
	replicas int32
	// from is the StatefulSet's replica count before this reconcile.
	from int32
	// draining says which departing brokers are still draining (the
	// scale-down waits for them).
	draining string
	// blocked says why a scale-down is held: a departing broker cannot
	// drain (does not implement it, or does not answer).
	blocked string
}

// broker addresses the broker pod of c with that ordinal, with the
// cluster's credentials.
func broker(c *streamsv1alpha1.StreamCluster, ordinal int32, creds brokeradmin.Credentials) brokeradmin.Broker {
	pod := resources.PodName(c, ordinal)
	return brokeradmin.Broker{Namespace: c.Namespace, Cluster: c.Name, Pod: pod, URL: resources.BrokerURL(c, pod), Credentials: creds}
}

// observeBrokers asks the first n brokers for their status, concurrently,
// each call bounded by BrokerCallTimeout.
func (r *StreamClusterReconciler) observeBrokers(ctx context.Context, c *streamsv1alpha1.StreamCluster, n int32, creds brokeradmin.Credentials) []brokerObservation {
	out := make([]brokerObservation, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			b := broker(c, i, creds)
			cctx, cancel := context.WithTimeout(ctx, r.Options.BrokerCallTimeout)
			defer cancel()
			st, err := r.Options.BrokerAdmin.Status(cctx, b)
			out[i] = brokerObservation{pod: b.Pod, status: st, err: err}
			if err == nil && c.Spec.TieredStorage != nil {
				out[i].tier = r.observeTier(cctx, b)
			}
		})
	}
	wg.Wait()
	return out
}

// observeTier asks b for its view of the object storage; nil when the
// admin or the broker cannot tell (not implemented, no answer: the status
// call's answer already reports a broker that does not answer).
func (r *StreamClusterReconciler) observeTier(ctx context.Context, b brokeradmin.Broker) *wire.TierStatus {
	ta, ok := r.Options.BrokerAdmin.(brokeradmin.TierAdmin)
	if !ok {
		return nil
	}
	t, err := ta.Tier(ctx, b)
	if err != nil {
		return nil
	}
	return &t
}

// planReplicas decides the StatefulSet's replica count. Scaling up (or
// creating) applies spec.replicas at once. Scaling down never removes a
// broker that has not drained: each departing broker (the highest
// ordinals, which a StatefulSet removes first) is asked to drain, and the
// count only drops past the brokers that report Drained, from the top. A
// broker that cannot drain holds the scale-down where it is.
func (r *StreamClusterReconciler) planReplicas(ctx context.Context, c *streamsv1alpha1.StreamCluster, creds brokeradmin.Credentials, sts *appsv1.StatefulSet, desired, current int32, brokers []brokerObservation) scalePlan {
	if sts == nil || desired >= current {
		r.cancelDrains(ctx, c, creds, desired, brokers)
		return scalePlan{replicas: desired, from: current}
	}
	type answer struct {
		ds  brokeradmin.DrainStatus
		err error
	}
	answers := make([]answer, current)
	var wg sync.WaitGroup
	for ord := desired; ord < current; ord++ {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, r.Options.BrokerCallTimeout)
			defer cancel()
			ds, err := r.Options.BrokerAdmin.Drain(cctx, broker(c, ord, creds))
			answers[ord] = answer{ds, err}
		})
	}
	wg.Wait()

	target := current
	for ord := current - 1; ord >= desired; ord-- {
		if answers[ord].err != nil || !answers[ord].ds.Done() {
			break
		}
		target = ord
	}
	var blocked, waiting []string
	for ord := desired; ord < target; ord++ {
		pod := resources.PodName(c, ord)
		switch a := answers[ord]; {
		case brokeradmin.IsNotSupported(a.err):
			blocked = append(blocked, fmt.Sprintf("broker %s does not implement drain (%v)", pod, a.err))
		case brokeradmin.IsDrainRefused(a.err):
			blocked = append(blocked, fmt.Sprintf("broker %s refused to drain: %v", pod, a.err))
		case a.err != nil:
			blocked = append(blocked, fmt.Sprintf("broker %s did not answer the drain call: %v", pod, a.err))
		case !a.ds.Done():
			waiting = append(waiting, fmt.Sprintf("%s: %s", pod, a.ds))
		}
	}
	plan := scalePlan{replicas: target, from: current}
	switch {
	case len(blocked) > 0:
		plan.blocked = fmt.Sprintf("scale-down from %d to %d brokers held at %d: a broker is only removed once it has drained (handed its streams off and left the metadata log); %s",
			current, desired, target, strings.Join(blocked, "; "))
	case len(waiting) > 0:
		plan.draining = fmt.Sprintf("scaling down from %d to %d brokers: waiting for %d departing brokers to drain: %s",
			current, desired, len(waiting), strings.Join(waiting, "; "))
	}
	return plan
}

// cancelDrains tells the brokers that stay (ordinal below desired) and
// report a drain to stop draining: a scale-down was reverted before it
// completed.
func (r *StreamClusterReconciler) cancelDrains(ctx context.Context, c *streamsv1alpha1.StreamCluster, creds brokeradmin.Credentials, desired int32, brokers []brokerObservation) {
	for i, b := range brokers {
		// A cordon (a drain that stays a member) is someone's decision
		// for maintenance, not a scale-down's leftover: only they lift it.
		if int32(i) >= desired || b.err != nil || b.status.Drain.Phase == brokeradmin.DrainNone || b.status.Drain.Stay {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, r.Options.BrokerCallTimeout)
		err := r.Options.BrokerAdmin.CancelDrain(cctx, broker(c, int32(i), creds))
		cancel()
		if err != nil {
			ctrl.LoggerFrom(ctx).Info("cannot cancel a broker's drain", "broker", b.pod, "err", err.Error())
			continue
		}
		event(r.Recorder, c, eventNormal, "DrainCancelled", "ScaleUp",
			"broker %s stays (spec.replicas is %d): its drain was cancelled", b.pod, desired)
	}
}

// scaleEvents reports the replica changes this reconcile applied.
func (r *StreamClusterReconciler) scaleEvents(c *streamsv1alpha1.StreamCluster, current int32, o clusterObservation) {
	if o.sts == nil || o.applyErr != nil || o.specErr != nil {
		return
	}
	switch p := o.plan; {
	case p.replicas > current:
		event(r.Recorder, c, eventNormal, "ScalingUp", "Scale", "scaling up from %d to %d brokers", current, p.replicas)
	case p.replicas < current:
		event(r.Recorder, c, eventNormal, "ScaledDown", "Scale",
			"brokers %s drained: scaling down from %d to %d brokers", podRange(c, p.replicas, current), current, p.replicas)
	}
}

func podRange(c *streamsv1alpha1.StreamCluster, from, to int32) string {
	names := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		names = append(names, resources.PodName(c, i))
	}
	return strings.Join(names, ", ")
}
