// Package ownership decides which broker of a cluster writes which internal
// streams, through slot Leases in the Kubernetes API.
//
// # Slots
//
// Internal streams hash onto a fixed number of slots: slot(id) = id % Slots,
// or PlaceBy(id) % Slots — the broker places every partition of a stream by
// its first, so that one owner writes the whole stream.
// Slot n is the coordination.k8s.io/v1 Lease <cluster>-slot-<n> in the
// cluster's namespace, labelled streams.picomq.io/cluster=<cluster>, whose
// spec.holderIdentity is the member identity (pod name plus incarnation) of
// the broker that owns it:
//
//	kubectl get leases -l streams.picomq.io/cluster=<cluster>
//
// Each broker also renews a member Lease <cluster>-member-<node>
// (streams.picomq.io/role=member), annotated streams.picomq.io/draining=true
// while it drains. A member is live, for this broker, while its member Lease
// has changed within LeaseDuration of this broker's own clock and it is not
// draining. The member Lease is what keeps a broker's slots: slot Leases
// are written when their holder changes (a take, a hand-off), never
// renewed, so the API server takes one write per broker per RetryPeriod
// however many slots there are, and each slot Lease still names its holder
// truthfully (its renewTime is that of the take).
//
// # One manager per broker
//
// A Manager is one loop per broker, not one leader elector per slot: an
// informer watches every Lease of the cluster, and the loop changes them only
// with conditional updates (the resourceVersion it decided from; a Conflict
// means another broker won, and the loop decides again from what it learns).
// Versions are compared as the API server's comparable resourceVersions
// (KEP-5504): a cache may deliver another broker's write before this one
// handles the answer to its own earlier write, and an older version never
// replaces a newer one seen (observe.go).
// Each RetryPeriod it renews its member Lease, hands off the slots it holds
// beyond its fair share, and takes free or expired slots up to it. After an
// outage every held slot may need a write at once (below), and a failover
// takes up to Slots: the client it is given must allow Slots+1 writes per
// RetryPeriod: see RestConfigFor.
//
// Fair share: the live members' identities, sorted, with L live and S slots;
// the member at rank r targets S/L, plus one if r < S mod L. A draining
// member targets 0. Hand-offs and takes prefer, per slot, the live member the
// rendezvous hash of (identity, slot) ranks first, so the assignment moves
// little when members come and go.
//
// A hand-off goes "the old holder lets go first, then the new one takes": the
// holder stops admitting opens for the slot (MayOpen refuses), calls Release
// (the broker closes the slot's open streams through the metadata log), and
// only then clears holderIdentity. Any broker under its share takes a free
// slot at once.
//
// # The timing rule
//
// A holder serves a slot until the time its last successful renewal of its
// member Lease (or its take of the slot) was SENT, plus RenewDeadline, by
// its own clock. From that instant MayOpen refuses, and the loop calls
// Revoke (stop writing at once, no I/O) — whether or not the API server
// answers, because every request the loop makes is bounded by the earliest
// such deadline.
//
// Another broker takes a slot held by someone else only after LeaseDuration
// has passed on ITS OWN clock since it last saw a sign of the holder's life:
// a change of the slot Lease, or of a member Lease naming the holder (or
// ceasing to). It never compares a Lease's renewTime with its clock, so
// clock offsets between brokers do not matter; clock rates may differ by up
// to the margin LeaseDuration - RenewDeadline leaves. The last renewal the
// holder counted was sent before the change the taker saw, so the holder
// stopped serving at least LeaseDuration - RenewDeadline before the take.
//
// # Fences
//
// A renewal and a take are writes of different Leases, so a take cannot
// conflict with the renewal it raced; the member Lease carries the
// conflict instead. Before taking the slots of a holder whose member Lease
// (read from the API server, not the cache) still names it, the taker
// writes that Lease naming nobody, conditionally on the version it saw
// unchanged for LeaseDuration: a renewal that got there first makes the
// fence fail, and the holder is live after all. A holder extends its slots
// only by a renewal that continues a version naming it: a write over a
// fence, over another incarnation's write, or a create (the Lease was
// deleted) stops serving every held slot, which is served again only after
// its slot Lease was written again, conditionally on the holder's last
// write of it — a write that fails if the slot was taken meanwhile. A
// holder no member Lease names is not fenced: its next renewal would not
// continue, and its slots are taken LeaseDuration after the change.
//
// # Failsafe
//
// A holder that cannot renew its member Lease would stop serving at its
// renew deadline, and an API server down for every broker (a control-plane
// upgrade, an etcd outage) would stop every write of the cluster although
// no other broker could take a slot meanwhile: a take is a write to that
// same API server. So a holder whose renewal failed asks every member of
// the metadata log's configuration, over the peer network, to confirm that
// it cannot reach the API server either and to promise to take none of the
// holder's slots for a while (Config.Failsafe sends that round; the members
// answer with AnswerFailsafe). When every member confirms, the holder
// extends the slots it still serves to the round's send time plus
// RenewDeadline, exactly as a renewal would have; when any member refuses
// or does not answer — it reaches the API server, it is paused, dead or
// partitioned from the holder — the round fails and the holder stops at its
// deadline as without failsafe.
//
// The promise: a member that answered a round of holder H takes none of H's
// slots (nor fences H's member Lease) until LeaseDuration has passed on its
// own clock after the later of its last answer to H and its first contact
// with the API server after that answer (a successful write of its own
// member Lease, before or at its first read of H's). The holder's round was
// sent before the answer, so the holder stops serving at least
// LeaseDuration - RenewDeadline before the promise lets go — the same margin
// as the timing rule. A broker that starts has promised nothing, and needs
// none: its first observation of every Lease is stamped at its first read.
//
// Why every member and not a majority (Patroni's failsafe_mode decided the
// same): one member that still reaches the API server while the holder
// does not would see the holder's member Lease unchanged for LeaseDuration
// and take its slots; only that member's own promise rules that out. A
// member that cannot answer (crashed, paused, cut from the holder) might be
// such a member, so an outage together with a member down stops the
// failsafe: every slot then waits for the API server. Only slots served
// without a gap are extended: a slot past its deadline is written again
// through the API server first, as without failsafe. The members asked
// are those of the metadata log's latest configuration as the holder and
// every answer know it; a broker added after a round's answers was not
// asked, and could take the holder's slots early if it alone reached the
// API server — a join during an outage of everyone else's, left open.
//
// Writes never depend on this: the epochs of the metadata log and the
// journals' fences refuse a deposed owner whatever the Leases say. Failsafe
// only keeps the bound on stale reads while serving through the outage.
//
// # The Lease routes, the epoch fences
//
// No lease can stop a paused or partitioned holder from writing. What fences
// it is the metadata log: the new owner opens every stream at the next epoch
// before writing, and the state machine refuses commits carrying an older
// one. Ownership only keeps the number of brokers that try to write one
// stream at one at a time, almost always, and bounds stale reads by the
// timing rule.
//
// # Callbacks
//
// Acquire, Release and Revoke are called from the manager's goroutine. Every
// Acquire that returns nil is followed, for that slot on that broker, by
// exactly one Release that returns nil or one Revoke, before the slot is
// given up or acquired again. Wired to the broker core:
//
//	var m *ownership.Manager
//	m, err := ownership.New(ownership.Config{
//		Client: kubernetes.NewForConfigOrDie(ownership.RestConfigFor(restCfg, slots, retry)),
//		// ... names and timings ...
//		Release: func(ctx context.Context, slot int) error {
//			return core.Release(ctx, func(id uint64) bool { return m.SlotOf(id) == slot })
//		},
//		Revoke: func(slot int) { core.Revoke(func(id uint64) bool { return m.SlotOf(id) == slot }) },
//	})
//	// core's Config takes m as its Ownership (MayOpen); go m.Run(ctx).
//
// A graceful stop is SetDraining(ctx, true), waiting until Held is empty,
// then ending Run's context; ending it without that leaves the Leases to
// expire, as after a crash.
package ownership
