package v1alpha1

// Conditions and their reasons, as the operator writes them in
// status.conditions (metav1.Condition). The strings are part of the API:
// health checks, alerts and scripts match on them, so they never change.
//
// Every condition carries observedGeneration; a condition whose
// observedGeneration is below metadata.generation describes an older spec
// (the operator has not looked at the latest one yet), so a health check
// should report it as progressing whatever it says.
//
// # StreamCluster
//
// A StreamCluster has three conditions: Ready, Progressing and Degraded.
//
//   - Healthy: Ready=True.
//   - Progressing: Ready=False and Degraded=False (brokers starting, a
//     rollout, a scaling, a drain, a metadata election, slots changing
//     hands), or Progressing=True.
//   - Degraded: Degraded=True. The operator cannot do what the spec asks
//     without a person: the reason says why (ClusterIDMismatch,
//     MemberRemoved, InvalidSpec, TLSSecretNotFound, TLSSecretInvalid,
//     AuthSecretNotFound, ReservedTokenName, URLSigningSecretNotFound,
//     URLSigningSecretInvalid, ApplyFailed, BrokersFailing,
//     ScaleDownBlocked, StorageChangeNotApplied, TieredStorageUnreachable,
//     TieredStorageRefused) and the message what to do.
//   - Unknown: Ready=Unknown with reason BrokerUnreachable: the pods are
//     ready but no broker answered the operator, so whether the cluster
//     serves is not known (the message says which broker and why).
//   - Suspended: Progressing=False with reason Paused (spec.paused).
//
// For Argo CD, a custom health check (resource.customizations.health.
// streams.picomq.io_StreamCluster in argocd-cm) along these lines:
//
//	hs = {status = "Progressing", message = "waiting for the operator"}
//	if obj.status ~= nil and obj.status.conditions ~= nil then
//	  for _, c in ipairs(obj.status.conditions) do
//	    if c.type == "Degraded" and c.status == "True" then
//	      return {status = "Degraded", message = c.reason .. ": " .. c.message}
//	    end
//	    if c.type == "Progressing" and c.reason == "Paused" then
//	      hs = {status = "Suspended", message = c.message}
//	    end
//	    if c.type == "Ready" and c.status == "True" and hs.status ~= "Suspended" then
//	      hs = {status = "Healthy", message = c.message}
//	    end
//	  end
//	end
//	return hs
//
// Flux (kstatus) reads Ready and observedGeneration without configuration:
// Ready=True at the current generation is Current, anything else
// InProgress until the timeout. To fail fast on Degraded, a
// Kustomization's spec.healthCheckExprs can say, for this kind:
//
//	current: status.conditions.exists(e, e.type == 'Ready' && e.status == 'True' && e.observedGeneration == metadata.generation)
//	failed: status.conditions.exists(e, e.type == 'Degraded' && e.status == 'True')
//
// # Stream
//
// A Stream has one condition, Ready.
//
//   - Healthy: Ready=True (reason Created, or Recreated: the stream exists as
//     asked, but was deleted outside the operator once and restarted at
//     offset 0).
//   - Progressing: Ready=False with reason ClusterNotReady,
//     BrokerUnreachable, BrokerError or Deleting: the operator retries with
//     backoff.
//   - Degraded: Ready=False with reason Conflict, InvalidSpec,
//     ClusterNotFound, NamespaceNotAllowed, Expired or TieringNotConfigured:
//     the operator does not retry until the spec, the cluster, the
//     namespace's labels or the broker's stream changes.
//   - Unknown (or Suspended): Ready=Unknown with reason Unmanaged (the
//     streams.picomq.io/managed: "false" annotation).
//
// # StreamAccess
//
// A StreamAccess has one condition, Ready.
//
//   - Healthy: Ready=True, reason Accepted: the token is in the cluster's
//     access Secret (the brokers accept it once their volume syncs) and
//     the StreamAccess's Secret is written.
//   - Degraded: Ready=False with reason ClusterNotFound,
//     NamespaceNotAllowed, AuthNotEnabled, TokenSecretNotFound,
//     TokenInvalid, SecretConflict or InvalidSpec: the brokers hold no
//     token for it (one they held is removed) until the spec, the
//     cluster, the namespace's labels or the Secret named changes.

// Condition types.
const (
	// ConditionReady is True when the object is what its spec asks for and
	// serves: for a StreamCluster, every desired broker is ready, the
	// metadata log has a leader and every slot has a live holder; for a
	// Stream, the stream exists on its cluster with the spec's
	// configuration.
	ConditionReady = "Ready"
	// ConditionProgressing (StreamCluster) is True while a rollout, a
	// scaling or a drain is under way; False when the cluster is stable,
	// paused, or its scale-down is held.
	ConditionProgressing = "Progressing"
	// ConditionDegraded (StreamCluster) is True when something needs a
	// person's attention; the reason and message say what.
	ConditionDegraded = "Degraded"
)

// Reasons of a StreamCluster's Ready condition.
const (
	// ReasonAllBrokersReady (Ready=True): every desired broker is ready,
	// the metadata log has a leader and, for brokers that report slots
	// (every cluster-mode broker), each of the spec's slots is held by a
	// broker that answered. Healthy.
	ReasonAllBrokersReady = "AllBrokersReady"
	// ReasonBrokersNotReady (Ready=False): fewer brokers ready than desired
	// (starting, rolling, or failing: the pods say which). Progressing.
	ReasonBrokersNotReady = "BrokersNotReady"
	// ReasonNoMetadataLeader (Ready=False): the brokers are ready but those
	// that answer know no metadata leader (an election under way).
	// Progressing; lasting, it needs a look at the brokers' logs.
	ReasonNoMetadataLeader = "NoMetadataLeader"
	// ReasonSlotsUnheld (Ready=False): a metadata leader exists but some
	// slots have no live holder: the brokers that answered hold fewer
	// distinct slots than spec.ownership.slots (the message gives both
	// counts and names the brokers that did not answer). Streams of an
	// unheld slot answer 503 until a broker takes it: a live broker takes
	// a free slot at once, and one whose holder stopped renewing once its
	// Lease has not changed for leaseDuration. Progressing (a failover);
	// lasting, the brokers cannot write their Leases (their logs say why)
	// or the holders do not answer the operator.
	ReasonSlotsUnheld = "SlotsUnheld"
	// ReasonSlotsUnbalanced (Ready=False): every slot has a live holder,
	// but the full members' shares (brokers that answered, neither
	// draining nor removed) differ by more than one slot: a broker that
	// joined or came back has not yet taken its share through the
	// hand-off (the message names the most and least loaded). Progressing
	// (Rebalancing); lasting, the brokers' logs say why no slot moves.
	ReasonSlotsUnbalanced = "SlotsUnbalanced"
	// ReasonCreating (Ready=False, Progressing=True): the brokers'
	// StatefulSet does not exist yet. Progressing.
	ReasonCreating = "Creating"
	// ReasonBrokerUnreachable (StreamCluster Ready=Unknown): the broker
	// pods are ready but none answered the operator's status call (a name
	// that does not resolve, a connection refused, a timeout: the message
	// names the broker and the error), so the operator cannot tell whether
	// the metadata log has a leader. Also the reason of a Stream's
	// Ready=False when its cluster's admin API could not be reached.
	// Retried; lasting, check the network between the operator and the
	// pods (an operator outside the cluster cannot reach them: see the
	// admin-url annotation).
	ReasonBrokerUnreachable = "BrokerUnreachable"
)

// Reasons of a StreamCluster's Progressing condition.
const (
	// ReasonRollingUpdate (Progressing=True): the StatefulSet has not
	// observed its latest spec, or not every broker runs its latest
	// revision.
	ReasonRollingUpdate = "RollingUpdate"
	// ReasonScalingUp (Progressing=True): brokers are being added.
	ReasonScalingUp = "ScalingUp"
	// ReasonScalingDown (Progressing=True): drained brokers are being
	// removed.
	ReasonScalingDown = "ScalingDown"
	// ReasonDraining (Progressing=True): a scale-down waits for the
	// departing brokers to hand their streams off.
	ReasonDraining = "Draining"
	// ReasonBrokersNotStarted (Progressing=True): every broker runs the
	// latest revision but not all are ready yet.
	ReasonBrokersNotStarted = "BrokersStarting"
	// ReasonRebalancing (Progressing=True): the brokers run the latest
	// revision, but slots still move to even the shares (see
	// ReasonSlotsUnbalanced).
	ReasonRebalancing = "Rebalancing"
	// ReasonRepairing (Progressing=True): committed objects have fewer
	// copies on the current members than the replication factor asks
	// (status.underReplicated): the metadata leader copies them again from
	// a surviving replica (a broker removed, or lost with its disk).
	ReasonRepairing = "Repairing"
	// ReasonStable (Progressing=False): nothing is under way.
	ReasonStable = "Stable"
	// ReasonPaused (Progressing=False): spec.paused is true; the operator
	// changes no child object. Suspended.
	ReasonPaused = "Paused"
	// ReasonScaleDownBlocked (Progressing=False and Degraded=True): a
	// scale-down is held because a departing broker cannot drain (it does
	// not implement drain, or does not answer). Degraded.
	ReasonScaleDownBlocked = "ScaleDownBlocked"
)

// Reasons of a StreamCluster's Degraded condition (and, for InvalidSpec, of
// a Stream's Ready condition).
const (
	// ReasonAsExpected (Degraded=False): nothing needs attention.
	ReasonAsExpected = "AsExpected"
	// ReasonClusterIDMismatch (Degraded=True): a broker reports a cluster id
	// other than status.clusterId, which the operator recorded and never
	// changes: it belongs to another metadata log (a cluster bootstrapped
	// again from an empty data directory, a volume from another cluster).
	// The message names the broker and both ids; that broker counts for no
	// leader and no slot. Degraded until it reports the recorded id (or
	// leaves).
	ReasonClusterIDMismatch = "ClusterIDMismatch"
	// ReasonMemberRemoved (Degraded=True): a broker reports that the
	// cluster removed its member for good: it came back with the data
	// directory of a member taken out (by a recovery of the metadata log
	// from a quorum lost for good, say), which is never let back in. It
	// stays up but serves nothing (no metadata log, no slots, /readyz 503)
	// and counts as no ready broker, no slot holder and no view of the
	// leader. The message names the pod and member and says what to do:
	// set its data directory aside or delete its PVC (then its pod), so
	// that it joins as a new member. A Warning event records it once.
	// Degraded until it reports itself a member again.
	ReasonMemberRemoved = "MemberRemoved"
	// ReasonFailsafe (Degraded=True): brokers report that they cannot
	// reach the API server and serve their slots on failsafe rounds every
	// member confirmed over the peer network (every member cannot reach it
	// either). Appends go on; no slot can move, so a broker that dies now
	// has its slots wait for the API server. The message names the brokers
	// and since when. A Warning event records it once.
	ReasonFailsafe = "Failsafe"
	// ReasonInvalidSpec (StreamCluster Degraded=True, Stream Ready=False):
	// the spec cannot be turned into children or a broker stream; the
	// message names the field. Degraded until the spec changes.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonTLSSecretNotFound (Degraded=True): spec.tls names a Secret
	// that does not exist; the broker pods cannot start (their volume
	// waits for it). The message names the Secret. Degraded until it
	// exists.
	ReasonTLSSecretNotFound = "TLSSecretNotFound"
	// ReasonTLSSecretInvalid (Degraded=True): the spec.tls Secret lacks
	// tls.crt, tls.key or ca.crt, or they do not parse, do not match, are
	// not signed by ca.crt, or do not cover the brokers' DNS names. The
	// message names the Secret and what is wrong. Degraded until it is
	// fixed.
	ReasonTLSSecretInvalid = "TLSSecretInvalid"
	// ReasonAuthSecretNotFound (Degraded=True): spec.auth names a Secret
	// that does not exist; the broker pods cannot start. Degraded until it
	// exists.
	ReasonAuthSecretNotFound = "AuthSecretNotFound"
	// ReasonReservedTokenName (Degraded=True): the spec.auth Secret has a
	// key picomq-operator, the name of the operator's own token: the
	// operator's token replaces it in the brokers' token directory, so
	// that token does not work. Degraded until the key is renamed.
	ReasonReservedTokenName = "ReservedTokenName"
	// ReasonURLSigningSecretNotFound (Degraded=True): spec.auth.urlSigning
	// names a Secret that does not exist; the broker pods cannot start
	// (their volume waits for it). Degraded until it exists.
	ReasonURLSigningSecretNotFound = "URLSigningSecretNotFound"
	// ReasonURLSigningSecretInvalid (Degraded=True): the spec.auth.urlSigning
	// Secret holds no key, a key whose name is not a key id (letters,
	// digits, '.', '_', '-', 64 at most, not starting with '.') or a value
	// shorter than 32 bytes: the brokers skip such a key, so URLs it would
	// sign or verify fail. The message names the Secret and the key.
	// Degraded until it is fixed.
	ReasonURLSigningSecretInvalid = "URLSigningSecretInvalid"
	// ReasonApplyFailed (Degraded=True): applying a child object failed
	// (refused by the apiserver or an admission webhook); retried with
	// backoff. Degraded.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonBrokersFailing (Degraded=True): broker pods are failing: a
	// container in CrashLoopBackOff, an image that cannot be pulled, a pod
	// that cannot be scheduled. The message names each pod with its
	// container's waiting reason, restart count and last termination
	// message (the broker writes its fatal error there). Degraded until
	// the pods run.
	ReasonBrokersFailing = "BrokersFailing"
	// ReasonStorageImmutable (Degraded=True): spec.storage asks for a claim
	// template the StatefulSet cannot take (its claim templates are
	// immutable); the old one is kept and everything else is applied.
	// Degraded until the spec changes back or the claims are changed by
	// hand.
	ReasonStorageImmutable = "StorageChangeNotApplied"
	// ReasonTieredStorageUnreachable (Degraded=True): a broker cannot reach
	// spec.tieredStorage's endpoint (TIER_UNREACHABLE: DNS, connection,
	// TLS, timeouts). Sealed segments wait on local disks and reads of
	// tiered ranges fail. The message names the broker and its last
	// error. Degraded until every broker reaches it again.
	ReasonTieredStorageUnreachable = "TieredStorageUnreachable"
	// ReasonTieredStorageRefused (Degraded=True): the object storage
	// answers but refuses the brokers (TIER_REFUSED: access denied, no
	// such bucket, bad credentials). Fix the credentials Secret (re-read
	// without a restart) or the bucket. Degraded until every broker
	// succeeds again.
	ReasonTieredStorageRefused = "TieredStorageRefused"
	// ReasonTieredStorageSecretNotFound (Degraded=True): the Secret
	// spec.tieredStorage.credentialsSecret (or caSecret) names does not
	// exist, or lacks a key it names; the broker pods cannot start (their
	// volume waits for it). Degraded until it is right.
	ReasonTieredStorageSecretNotFound = "TieredStorageSecretNotFound"
)

// Reasons of a Stream's Ready condition.
const (
	// ReasonCreated (Ready=True): the stream exists on its cluster as the
	// spec asks. Healthy.
	ReasonCreated = "Created"
	// ReasonRecreated (Ready=True): the stream had been deleted on the
	// broker outside the operator and was recreated empty (its offsets
	// restarted at 0). Healthy, but data was lost; it stays until the spec
	// changes.
	ReasonRecreated = "Recreated"
	// ReasonClusterNotFound (Ready=False): spec.clusterRef names no
	// StreamCluster the operator can see (none of that name in its
	// namespace, or a namespace the operator does not watch). Degraded
	// until the cluster exists.
	ReasonClusterNotFound = "ClusterNotFound"
	// ReasonClusterNotReady (Ready=False): the cluster is not Ready and its
	// admin API does not answer; retried with backoff. Progressing.
	ReasonClusterNotReady = "ClusterNotReady"
	// ReasonBrokerError (Ready=False): a call to the broker failed; the
	// message starts with the broker's error code (a broker that could not
	// be reached at all is BrokerUnreachable instead). Retried with
	// backoff, except a configuration the broker refuses. Progressing;
	// lasting, Degraded.
	ReasonBrokerError = "BrokerError"
	// ReasonConflict (Ready=False): the broker's stream cannot become what
	// the spec asks without losing data (another content type, fewer
	// partitions, another lifetime), or another Stream (in this namespace
	// or another: the one that kept it first, else the oldest) keeps the
	// same broker stream on the cluster: the operator then asks nothing of
	// the brokers for this one, and deleting it deletes nothing. Not
	// retried until something changes. Degraded.
	ReasonConflict = "Conflict"
	// ReasonUnmanaged (Ready=Unknown): the streams.picomq.io/managed
	// annotation is "false"; the operator leaves the broker's stream alone.
	ReasonUnmanaged = "Unmanaged"
	// ReasonDeleting (Ready=False): the Stream is being deleted and deleting
	// the broker's stream failed; retried with backoff. Progressing.
	ReasonDeleting = "Deleting"
	// ReasonNamespaceNotAllowed (Ready=False): spec.clusterRef names a
	// StreamCluster in another namespace whose spec.allowedNamespaces does
	// not admit the Stream's (the message names the cluster and its rule).
	// The operator leaves the broker's stream alone: it creates nothing,
	// and a stream it kept before the rule or the namespace's labels
	// changed is neither updated nor deleted (deleting the resource then
	// leaves it on the broker). Managed again once admitted. Degraded
	// until the cluster's rule or the namespace's labels change.
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"
	// ReasonExpired (Ready=False): the stream reached the end of the
	// lifetime its spec gave it (spec.expiresAt, or spec.ttl unused) and the
	// broker deleted it; not recreated until the spec changes. Degraded (or
	// expected: delete the resource).
	ReasonExpired = "Expired"
	// ReasonTieringNotConfigured (Ready=False): spec.tiering is Enabled
	// but the cluster has no spec.tieredStorage. Nothing is changed on the
	// broker until one of them changes. Degraded.
	ReasonTieringNotConfigured = "TieringNotConfigured"
)

// Reasons of a StreamAccess's Ready condition (with ClusterNotFound,
// NamespaceNotAllowed and InvalidSpec above).
const (
	// ReasonAccepted (Ready=True): the cluster admits the StreamAccess's
	// namespace and its token is in the cluster's access Secret
	// (<cluster>-access-tokens), which the brokers' token directory
	// projects. Healthy.
	ReasonAccepted = "Accepted"
	// ReasonAuthNotEnabled (Ready=False): the cluster has no spec.auth,
	// so its brokers check no token (every request is allowed). No token
	// is granted until spec.auth is set. Degraded.
	ReasonAuthNotEnabled = "AuthNotEnabled"
	// ReasonTokenSecretNotFound (Ready=False): spec.tokenFrom names a
	// Secret that does not exist; the brokers hold no token for this
	// StreamAccess until it does. Degraded.
	ReasonTokenSecretNotFound = "TokenSecretNotFound"
	// ReasonTokenInvalid (Ready=False): the spec.tokenFrom Secret lacks the
	// key, or its value is not a token the brokers accept (16 to 4096
	// bytes, no white space, ':' or ','). The message never quotes it.
	// Degraded until it is fixed.
	ReasonTokenInvalid = "TokenInvalid"
	// ReasonSecretConflict (Ready=False): the Secret the StreamAccess
	// would write (spec.secretName) exists and is not one the operator
	// wrote for it. The operator leaves it alone and grants nothing until
	// it is renamed or deleted. Degraded.
	ReasonSecretConflict = "SecretConflict"
)
