package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/controllers/brokeradmin"
)

// A departing broker that has handed every slot off but still holds
// object copies answers Draining with the copies left to move: the
// scale-down keeps holding, waiting, and says what the broker said is
// left. Only Drained lowers the StatefulSet.
func TestScaleDownHoldsWhileTheBrokerOnlyHandedItsSlotsOff(t *testing.T) {
	t.Parallel()
	const left = "owns no slot and no open stream; 12 copies of objects (4096 bytes) still to move to the brokers that stay"
	admin := newFakeAdmin()
	admin.drain = func(string) (brokeradmin.DrainStatus, error) {
		return brokeradmin.DrainStatus{Phase: brokeradmin.DrainInProgress, ObjectsHeld: 12, BytesHeld: 4096, Message: left}, nil
	}
	r := &StreamClusterReconciler{Options: Options{BrokerAdmin: admin, BrokerCallTimeout: time.Second}}
	c := testCluster()
	c.Spec.Replicas = 2
	plan := r.planReplicas(context.Background(), c, brokeradmin.Credentials{}, stsWith(3, 3, nil), 2, 3, brokersWithLeader("demo-0", 3))
	if plan.replicas != 3 || plan.blocked != "" {
		t.Fatalf("plan %+v: want the StatefulSet kept at 3, waiting", plan)
	}
	if !strings.Contains(plan.draining, "demo-2") || !strings.Contains(plan.draining, "0 slots, 0 open streams and 12 objects (4096 bytes) to move left") || !strings.Contains(plan.draining, "still to move") {
		t.Errorf("draining %q: want the broker, its progress and what it said is left", plan.draining)
	}
	if n := admin.called("Drain demo-2"); n != 1 {
		t.Errorf("demo-2 asked to drain %d times, want 1", n)
	}
}
