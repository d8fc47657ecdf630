package ownership

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// apiUnreachable reports whether err, from a write of our member Lease,
// says the API server could not be reached or could not answer (a
// transport error, a timeout, a 5xx or 429), as opposed to an answer about
// the Lease itself.
func apiUnreachable(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err), apierrors.IsNotFound(err),
		apierrors.IsForbidden(err), apierrors.IsUnauthorized(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return false
	}
	return true
}

// AnswerFailsafe answers holder's failsafe round: nil confirms that this
// broker cannot reach the API server either (its last write of its member
// Lease failed for that reason, or the one under way has hung for half a
// retry period) and records the promise before returning:
// none of holder's slots is taken until LeaseDuration after the later of
// now and this broker's next contact with the API server. A coded
// FailsafeRefused says why not.
func (m *Manager) AnswerFailsafe(holder string) error {
	now := m.clk.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case holder == "" || holder == m.cfg.Identity:
		return FailsafeRefused.With("holder", holder, "reason", "a round of this broker's own, or of no holder")
	case !m.apiFailing && (m.writingSince.IsZero() || now.Sub(m.writingSince) < m.cfg.RetryPeriod/2):
		// (A renewal hanging for half a period counts: an API server that
		// hangs rather than refuses is known unreachable well before the
		// renew deadline, without cutting short a slow one that answers.)
		return FailsafeRefused.With("holder", holder, "member", m.cfg.Identity,
			"reason", "this broker reaches the API server: the holder must renew there")
	}
	m.promised[holder] = promise{answered: now}
	m.met.failsafeAnswers.Inc()
	return nil
}

// promise is what this broker promised a holder in failsafe: to take none
// of its slots until LeaseDuration after the later of answered and
// contact.
type promise struct {
	answered time.Time
	contact  time.Time // first successful write of our member Lease after answered (zero: none yet)
}

// promiseUntilLocked is when this broker's promise to holder lets go: zero
// when there is none (or it has passed, and is forgotten); a time
// LeaseDuration from now while the API server has not been reached since
// the answer.
func (m *Manager) promiseUntilLocked(holder string, now time.Time) time.Time {
	p, ok := m.promised[holder]
	if !ok {
		return time.Time{}
	}
	if p.contact.IsZero() {
		return now.Add(m.cfg.LeaseDuration)
	}
	until := p.contact.Add(m.cfg.LeaseDuration)
	if !now.Before(until) {
		delete(m.promised, holder)
		return time.Time{}
	}
	return until
}

// promiseHoldsLocked reports whether a promise keeps this broker from
// taking holder's slots now.
func (m *Manager) promiseHoldsLocked(holder string, now time.Time) bool {
	return !m.promiseUntilLocked(holder, now).IsZero()
}

// noteMemberWriteLocked records how our last write of the member Lease
// went: whether the API server was unreachable (the failsafe answer), and
// the first contact after a promise.
func (m *Manager) noteMemberWriteLocked(err error, at time.Time) {
	m.apiFailing = apiUnreachable(err)
	if err != nil {
		return
	}
	for h, p := range m.promised {
		if p.contact.IsZero() {
			p.contact = at
			m.promised[h] = p
		}
	}
}

// failsafeRound runs Config.Failsafe for the slots this broker serves, and
// reports whether every member confirmed. sent is when the round was sent:
// the deadline it extends to is sent + RenewDeadline.
func (m *Manager) failsafeRound(ctx context.Context) (sent time.Time, ok bool) {
	if m.cfg.Failsafe == nil || !m.servesAny() {
		return time.Time{}, false
	}
	sent = m.clk.Now()
	err := m.cfg.Failsafe(ctx)
	if err != nil {
		m.met.failsafeRounds.WithLabelValues(roundRefused).Inc()
		m.log.Warn("failsafe round not confirmed by every member: slots stop at their renew deadline", "err", err)
		return sent, false
	}
	m.met.failsafeRounds.WithLabelValues(roundConfirmed).Inc()
	return sent, true
}

// servesAny reports whether a held slot is served and before its deadline:
// only then is a failsafe round worth the members' promises.
func (m *Manager) servesAny() bool {
	now := m.clk.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, h := range m.held {
		if h.serving && !h.rewrite && !h.letGo && now.Before(h.deadline) {
			return true
		}
	}
	return false
}

// extendByFailsafeLocked extends the held slots still served without a gap
// to sent + RenewDeadline, as a renewal sent then would have, and marks the
// cluster as in failsafe.
func (m *Manager) extendByFailsafeLocked(sent time.Time) int {
	n := 0
	for _, h := range m.held {
		if h.letGo || h.rewrite || !sent.Before(h.deadline) {
			continue
		}
		h.sent, h.deadline = sent, sent.Add(m.cfg.RenewDeadline)
		n++
	}
	if m.failsafeSince.IsZero() {
		m.failsafeSince = sent
		m.failsafeRoundsConfirmed = 0
	}
	m.failsafeRoundsConfirmed++
	m.met.failsafeActive.Set(1)
	return n
}

// endFailsafeLocked notes that the API server answered again: it returns
// when the failsafe began and how many rounds kept it (zero time: it was
// not on).
func (m *Manager) endFailsafeLocked() (since time.Time, rounds int) {
	since, rounds = m.failsafeSince, m.failsafeRoundsConfirmed
	m.failsafeSince, m.failsafeRoundsConfirmed = time.Time{}, 0
	m.met.failsafeActive.Set(0)
	return since, rounds
}

// failsafeEnded logs the end of a failsafe episode that began at since and
// was kept by rounds confirmed rounds; when the API server answers again
// (err nil) it also records an Event on this broker's member Lease, the
// trace of the outage an operator reads after it (nothing could be written
// during it).
func (m *Manager) failsafeEnded(ctx context.Context, since time.Time, rounds int, err error) {
	lasted := m.clk.Since(since).Round(time.Millisecond)
	if err != nil {
		m.log.Warn("failsafe round not confirmed: slots stop at their renew deadline", "failsafeFor", lasted, "rounds", rounds, "err", err)
		return
	}
	m.log.Info("API server answers again: failsafe ended", "failsafeFor", lasted, "rounds", rounds)
	msg := fmt.Sprintf("%s served its slots for %v through an API server outage on %d failsafe rounds every member confirmed", m.cfg.Identity, lasted, rounds)
	ctx, cancel := context.WithTimeout(ctx, m.cfg.RetryPeriod)
	defer cancel()
	now := metav1.NewTime(m.clk.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: MemberLeaseName(m.cfg.Cluster, m.cfg.Node) + ".", Namespace: m.cfg.Namespace,
			Labels: leaseLabels(m.cfg.Cluster, RoleMember)},
		InvolvedObject: corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease",
			Name: MemberLeaseName(m.cfg.Cluster, m.cfg.Node), Namespace: m.cfg.Namespace},
		Reason: EventReasonFailsafe, Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "picomq-broker", Host: m.cfg.Node},
		FirstTimestamp: metav1.NewTime(since), LastTimestamp: now, Count: 1,
		ReportingController: "streams.picomq.io/broker", ReportingInstance: m.cfg.Identity,
	}
	if _, err := m.cfg.Client.CoreV1().Events(m.cfg.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		m.log.Warn("recording the failsafe Event failed", "err", err)
	}
}

// EventReasonFailsafe is the reason of the Event a broker records on its
// member Lease after serving through an API server outage.
const EventReasonFailsafe = "Failsafe"

// failsafeRetry is how soon a round not confirmed is sent again while the
// slots are still served: the other brokers learn that they cannot reach
// the API server at their own renewals, up to a retry period apart.
func (m *Manager) failsafeRetry() time.Duration { return m.cfg.RetryPeriod / 4 }

// retryFailsafe is a round between periods (wake, at roundAt): the member
// Lease still could not be renewed and the last round was not confirmed.
func (m *Manager) retryFailsafe(ctx context.Context) {
	m.roundAt = time.Time{}
	ioctx, cancel := m.ioContext(ctx)
	defer cancel()
	sent, ok := m.failsafeRound(ioctx)
	m.mu.Lock()
	extended, rounds := 0, 0
	if ok && m.apiFailing {
		extended = m.extendByFailsafeLocked(sent)
		rounds = m.failsafeRoundsConfirmed
	}
	m.mu.Unlock()
	switch {
	case extended > 0 && rounds == 1:
		m.log.Warn("API server unreachable: serving on failsafe, every member confirmed it cannot reach it either", "slots", extended)
	case !ok && m.servesAny():
		m.roundAt = m.clk.Now().Add(m.failsafeRetry())
	}
}
