package ownership

// A fake API server for the unit tier: one object tracker shared by every
// broker's fake clientset, with what the fake clientset lacks by default —
// resourceVersions assigned on every write and checked on Update
// (optimistic concurrency, so conflicts are real), per-broker outages, and
// checks of the ownership protocol on every write to a slot Lease.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
)

var (
	leaseGVR = coordinationv1.SchemeGroupVersion.WithResource("leases")
	leaseGVK = coordinationv1.SchemeGroupVersion.WithKind("Lease")
	errDown  = errors.New("dial tcp 127.0.0.1:6443: connect: connection refused (test outage)")
)

// fakeAPI is the shared server.
type fakeAPI struct {
	leaseDuration time.Duration
	now           func() time.Time // the test's global time, stamped on writes

	mu        sync.Mutex
	tracker   k8stesting.ObjectTracker
	rv        int64
	lastWrite map[string]time.Time // Lease name -> global time of its last write
	// lastAlive: identity -> global time of its last write of a member
	// Lease naming it (what keeps its slots).
	lastAlive  map[string]time.Time
	violations []string
	writes     int
	takes      int // slot Leases whose holder moved from one broker to another
	fences     int // member Leases written naming nobody by another broker
	// slotWrites and memberWrites count the writes of each kind of Lease.
	slotWrites, memberWrites int

	// beforeUpdate, when set, runs as an Update arrives, before it applies:
	// a test makes the request slow by moving the writer's clock.
	beforeUpdate func(writer, name string)
}

func newFakeAPI(leaseDuration time.Duration, now func() time.Time) *fakeAPI {
	return &fakeAPI{
		leaseDuration: leaseDuration,
		now:           now,
		tracker:       k8stesting.NewObjectTracker(scheme.Scheme, scheme.Codecs.UniversalDecoder()),
		lastWrite:     map[string]time.Time{},
		lastAlive:     map[string]time.Time{},
	}
}

// client returns the clientset of the broker whose identity writes
// through it; while down is set every request fails as if the API server
// were unreachable.
func (a *fakeAPI) client(identity func() string, down *atomic.Bool) *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("*", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, errDown
		}
		obj, err := a.serve(identity(), action)
		return true, obj, err
	})
	c.PrependWatchReactor("leases", func(action k8stesting.Action) (bool, watch.Interface, error) {
		if down.Load() {
			return true, nil, errDown
		}
		var opts []metav1.ListOptions
		if w, ok := action.(k8stesting.WatchActionImpl); ok {
			opts = append(opts, w.ListOptions)
		}
		w, err := a.tracker.Watch(leaseGVR, action.GetNamespace(), opts...)
		return true, w, err
	})
	return c
}

func (a *fakeAPI) serve(writer string, action k8stesting.Action) (runtime.Object, error) {
	ns := action.GetNamespace()
	switch action.GetVerb() {
	case "get":
		return a.tracker.Get(leaseGVR, ns, action.(k8stesting.GetAction).GetName())
	case "list":
		obj, err := a.tracker.List(leaseGVR, leaseGVK, ns)
		if err != nil {
			return nil, err
		}
		sel := action.(k8stesting.ListAction).GetListRestrictions().Labels
		list := obj.(*coordinationv1.LeaseList)
		kept := list.Items[:0]
		for _, l := range list.Items {
			if sel == nil || sel.Matches(labels.Set(l.Labels)) {
				kept = append(kept, l)
			}
		}
		list.Items = kept
		return list, nil
	case "create":
		return a.create(writer, ns, action.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease))
	case "update":
		return a.update(writer, ns, action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease))
	}
	return nil, apierrors.NewMethodNotSupported(leaseGVR.GroupResource(), action.GetVerb())
}

func (a *fakeAPI) create(writer, ns string, l *coordinationv1.Lease) (runtime.Object, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.tracker.Get(leaseGVR, ns, l.Name); err == nil {
		return nil, apierrors.NewAlreadyExists(leaseGVR.GroupResource(), l.Name)
	}
	if h := holderOf(l); h != "" && h != writer {
		a.violate("%s created %s naming %s", writer, l.Name, h)
	}
	if strings.Contains(l.Name, "-member-") && holderOf(l) == writer {
		a.lastAlive[writer] = a.now()
	}
	l = l.DeepCopy()
	a.rv++
	l.ResourceVersion = strconv.FormatInt(a.rv, 10)
	if err := a.tracker.Create(leaseGVR, l, ns); err != nil {
		return nil, err
	}
	a.lastWrite[l.Name] = a.now()
	a.count(l.Name)
	return l.DeepCopy(), nil
}

func (a *fakeAPI) count(name string) {
	a.writes++
	switch {
	case strings.Contains(name, "-slot-"):
		a.slotWrites++
	case strings.Contains(name, "-member-"):
		a.memberWrites++
	}
}

func (a *fakeAPI) update(writer, ns string, l *coordinationv1.Lease) (runtime.Object, error) {
	if a.beforeUpdate != nil {
		a.beforeUpdate(writer, l.Name)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	obj, err := a.tracker.Get(leaseGVR, ns, l.Name)
	if err != nil {
		return nil, err
	}
	cur := obj.(*coordinationv1.Lease)
	if l.ResourceVersion != cur.ResourceVersion {
		return nil, apierrors.NewConflict(leaseGVR.GroupResource(), l.Name,
			fmt.Errorf("the object has been modified: resourceVersion %q, current %q", l.ResourceVersion, cur.ResourceVersion))
	}
	if strings.Contains(l.Name, "-slot-") {
		a.checkSlotWrite(writer, cur, l)
	}
	if strings.Contains(l.Name, "-member-") {
		a.checkMemberWrite(writer, cur, l)
	}
	l = l.DeepCopy()
	a.rv++
	l.ResourceVersion = strconv.FormatInt(a.rv, 10)
	if err := a.tracker.Update(leaseGVR, l, ns); err != nil {
		return nil, err
	}
	a.lastWrite[l.Name] = a.now()
	a.count(l.Name)
	return l.DeepCopy(), nil
}

// checkSlotWrite checks a write of a slot Lease against the protocol:
// only the holder renews or clears it; a broker names itself only; and a
// Lease held by one broker moves to another only after LeaseDuration
// without a change of it or a write of the holder's member Lease by the
// holder (all clocks of the tests run at one rate, so the global time
// measures every broker's).
func (a *fakeAPI) checkSlotWrite(writer string, cur, next *coordinationv1.Lease) {
	old, now := holderOf(cur), holderOf(next)
	switch {
	case now != "" && now != writer:
		a.violate("%s wrote %s naming %s", writer, next.Name, now)
	case old != "" && now == "" && writer != old:
		a.violate("%s cleared %s held by %s", writer, next.Name, old)
	case old != "" && now != "" && old != now:
		a.takes++
		last := a.lastWrite[next.Name]
		if alive := a.lastAlive[old]; alive.After(last) {
			last = alive
		}
		if since := a.now().Sub(last); since < a.leaseDuration {
			a.violate("%s took %s from %s %v after its last sign of life, before LeaseDuration %v", writer, next.Name, old, since, a.leaseDuration)
		}
	}
}

// checkMemberWrite checks a write of a member Lease: a broker names itself
// or nobody; it writes another's naming nobody (a fence) only after
// LeaseDuration without a change.
func (a *fakeAPI) checkMemberWrite(writer string, cur, next *coordinationv1.Lease) {
	old, now := holderOf(cur), holderOf(next)
	switch {
	case now != "" && now != writer:
		a.violate("%s wrote %s naming %s", writer, next.Name, now)
	case now == writer:
		a.lastAlive[writer] = a.now()
	case old != "" && old != writer:
		a.fences++
		if since := a.now().Sub(a.lastWrite[next.Name]); since < a.leaseDuration {
			a.violate("%s fenced %s of %s %v after its last change, before LeaseDuration %v", writer, next.Name, old, since, a.leaseDuration)
		}
	}
}

func (a *fakeAPI) violate(format string, args ...any) {
	a.violations = append(a.violations, fmt.Sprintf(format, args...))
}

// snapshot lists every Lease as the server holds it now.
func (a *fakeAPI) snapshot(ns string) []*coordinationv1.Lease {
	a.mu.Lock()
	defer a.mu.Unlock()
	obj, err := a.tracker.List(leaseGVR, leaseGVK, ns)
	if err != nil {
		panic(err)
	}
	items := obj.(*coordinationv1.LeaseList).Items
	out := make([]*coordinationv1.Lease, len(items))
	for i := range items {
		out[i] = items[i].DeepCopy()
	}
	return out
}

// holder returns the holder of a Lease on the server.
func (a *fakeAPI) holder(ns, name string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	obj, err := a.tracker.Get(leaseGVR, ns, name)
	if err != nil {
		return ""
	}
	return holderOf(obj.(*coordinationv1.Lease))
}

func (a *fakeAPI) takeViolations() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	v := a.violations
	a.violations = nil
	return v
}

// writeCount is how many Lease writes the API took so far; brokers may be
// writing still.
func (a *fakeAPI) writeCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.writes
}
