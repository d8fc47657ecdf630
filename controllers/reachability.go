package controllers

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"

	"github.com/go-logr/logr"
)

// cause is the part of a failed broker call a person needs: for a broker
// that could not be reached, the network error itself ("dial tcp: lookup
// demo-0.demo-headless.ns.svc: no such host", "dial tcp 10.0.0.7:4437:
// connect: connection refused") rather than the layers of wrapping around
// it; for a call that timed out, that it did; otherwise the error.
func cause(err error) string {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Error()
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.Error()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer before the call's deadline"
	}
	return err.Error()
}

// reachLog logs each broker's answers to the status call once per change:
// the first failure and every different one after it, and the first
// answer after failures. A broker that stays unreachable is asked at every
// reconcile (every NotReadyPollInterval); logging each time would bury the
// one line that says why.
type reachLog struct {
	mu sync.Mutex
	// last is the cause last logged per broker (namespace/cluster/pod);
	// "" once it answered.
	last map[string]string
}

// observe logs what changed in brokers since the last observation of
// that cluster.
func (l *reachLog) observe(log logr.Logger, namespace, cluster string, brokers []brokerObservation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[string]string{}
	}
	for _, b := range brokers {
		key := namespace + "/" + cluster + "/" + b.pod
		now := ""
		if b.err != nil {
			now = cause(b.err)
		}
		prev, seen := l.last[key]
		l.last[key] = now
		switch {
		case now != "" && now != prev:
			log.Info("broker did not answer the status call", "broker", b.pod, "error", now)
		case now == "" && seen && prev != "":
			log.Info("broker answers the status call again", "broker", b.pod)
		}
	}
}

// forget drops what was logged of a cluster's brokers (the cluster is
// gone).
func (l *reachLog) forget(namespace, cluster string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prefix := namespace + "/" + cluster + "/"
	for k := range l.last {
		if strings.HasPrefix(k, prefix) {
			delete(l.last, k)
		}
	}
}
