package controllers

import (
	"math/rand/v2"
	"time"

	"k8s.io/client-go/tools/events"

	"github.com/picomq/picomq/controllers/brokeradmin"
)

// Defaults of Options.
const (
	DefaultResyncPeriod       = 10 * time.Minute
	DefaultDrainPollInterval  = 10 * time.Second
	DefaultNotReadyPoll       = 30 * time.Second
	DefaultTierPollInterval   = 30 * time.Second
	DefaultErrorBackoffBase   = time.Second
	DefaultErrorBackoffMax    = 5 * time.Minute
	DefaultBrokerCallTimeout  = 10 * time.Second
	DefaultMaxConcurrentCalls = 8
	// FieldOwner is the operator's field manager in server-side apply.
	FieldOwner = "picomq-operator"
)

// Options tune both controllers. The zero value takes the defaults.
type Options struct {
	// ResyncPeriod is how often an idle object is reconciled again, to
	// repair drift on the brokers and refresh status. Each object's next
	// resync is jittered between 1x and 1.2x of it, so that a thousand
	// Streams created together do not resync together.
	ResyncPeriod time.Duration
	// StreamClusterConcurrency and StreamConcurrency are the controllers'
	// MaxConcurrentReconciles (default 1 and 4).
	StreamClusterConcurrency int
	StreamConcurrency        int
	// DrainPollInterval is how often a scale-down waiting for brokers to
	// drain asks them again.
	DrainPollInterval time.Duration
	// NotReadyPollInterval is how often a cluster that is not Ready is
	// looked at again even if no child changed (the metadata leader, for
	// one, changes without any Kubernetes event).
	NotReadyPollInterval time.Duration
	// TierPollInterval is how often a cluster with spec.tieredStorage asks
	// its brokers whether they reach the bucket: losing it is announced by
	// no Kubernetes event.
	TierPollInterval time.Duration
	// ErrorBackoffBase and ErrorBackoffMax bound the per-object exponential
	// backoff after a failed reconcile (a broker that does not answer, say).
	ErrorBackoffBase time.Duration
	ErrorBackoffMax  time.Duration
	// BrokerCallTimeout bounds each call to a broker.
	BrokerCallTimeout time.Duration
	// OperatorNamespace is the namespace the operator runs in: a
	// StreamCluster's NetworkPolicy admits it to the client port (the
	// operator's admin calls). "" (outside a cluster): none is added.
	OperatorNamespace string
	// BrokerImage is the broker image of clusters that name none.
	BrokerImage string
	// BrokerAdmin reaches individual brokers (status, drain). Default: the
	// HTTP admin API.
	BrokerAdmin brokeradmin.BrokerAdmin
	// StreamAdmins gives the Stream controller a client per cluster
	// endpoint. Default: broker clients reused across reconciles.
	StreamAdmins brokeradmin.StreamAdminFactory
	// SkipNameValidation lets tests run several managers in one process.
	SkipNameValidation bool

	// recorder, when set, replaces the manager's event recorder (tests
	// capture events with it).
	recorder events.EventRecorder
	// observe, when set, is called at the start of every reconcile (tests
	// count reconciles with it).
	observe func(controller string, key string)
}

func (o Options) withDefaults() Options {
	if o.ResyncPeriod <= 0 {
		o.ResyncPeriod = DefaultResyncPeriod
	}
	if o.StreamClusterConcurrency <= 0 {
		o.StreamClusterConcurrency = 1
	}
	if o.StreamConcurrency <= 0 {
		o.StreamConcurrency = 4
	}
	if o.DrainPollInterval <= 0 {
		o.DrainPollInterval = DefaultDrainPollInterval
	}
	if o.NotReadyPollInterval <= 0 {
		o.NotReadyPollInterval = DefaultNotReadyPoll
	}
	if o.TierPollInterval <= 0 {
		o.TierPollInterval = DefaultTierPollInterval
	}
	if o.ErrorBackoffBase <= 0 {
		o.ErrorBackoffBase = DefaultErrorBackoffBase
	}
	if o.ErrorBackoffMax <= 0 {
		o.ErrorBackoffMax = DefaultErrorBackoffMax
	}
	if o.BrokerCallTimeout <= 0 {
		o.BrokerCallTimeout = DefaultBrokerCallTimeout
	}
	if o.BrokerAdmin == nil {
		h := brokeradmin.NewHTTP()
		h.Timeout = o.BrokerCallTimeout
		o.BrokerAdmin = h
	}
	if o.StreamAdmins == nil {
		o.StreamAdmins = brokeradmin.NewClientFactory()
	}
	return o
}

// jitter returns d stretched by a random 0-20%: never shorter than d, so an
// idle object is reconciled at most once per period.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}
