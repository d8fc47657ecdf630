// Package controllers reconciles StreamCluster, Stream and StreamAccess
// resources.
//
// # Streams in other namespaces
//
// A Stream names its StreamCluster with spec.clusterRef, in its own
// namespace or, with clusterRef.namespace, in another: an application keeps
// its Streams in its namespace while the brokers run in, say,
// picomq-system. The cluster decides who may: spec.allowedNamespaces.from
// is Same (the default: its own namespace only), All, or Selector (the
// namespaces whose labels its selector matches). Its own namespace is
// always admitted. The rule is read at every reconcile of the Stream, and a
// Stream is reconciled again when its cluster's rule changes and when its
// namespace's labels change, so a Stream moves between admitted and not
// within seconds of either.
//
// A Stream whose namespace is not admitted is Ready False, reason
// NamespaceNotAllowed, with a message naming the cluster and its rule, and
// the operator asks nothing of the brokers for it: it creates nothing,
// updates nothing, repairs nothing. A Stream that was kept and stops being
// admitted (the rule narrowed, a label removed) is treated the same way:
// its broker stream is left as it is, data and policy — never deleted
// because a label changed —, and it is not managed until admitted again,
// when the next reconcile takes it up as if nothing happened (a policy
// changed in between is applied then). Deleting it while it is not
// admitted drops the finalizer and leaves the broker stream whatever its
// deletionPolicy (a Warning event says so): a namespace the cluster does
// not admit may not delete what the cluster holds.
//
// A broker stream is kept by one Stream. A name on the broker defaults to
// metadata.name, unique in a namespace only, so Streams "orders" of two
// namespaces name the same broker stream: the one that applied its spec
// to it first (else the oldest) keeps it, and the others are Ready False,
// reason Conflict, asking nothing of the brokers and deleting nothing
// when deleted, until the keeper goes (stream_keeper.go). Give Streams of
// other namespaces a spec.name under a prefix of their own
// (shop/orders): tokens can then be limited to it too.
//
// Deletion works across namespaces as beside the cluster: the finalizer
// deletes or retains the broker stream as deletionPolicy says, and a
// Stream whose cluster is gone (or going, its brokers silent) is released
// at once, its broker stream recorded in <cluster>-deleted-streams in the
// cluster's namespace and deleted when the cluster runs again — unless a
// Stream of any namespace names it by then. A Stream of another namespace
// is recorded only if the operator had applied it to the cluster and not
// found its namespace refused since: any namespace can name a cluster that
// is gone. Nothing the operator writes carries an owner reference across
// namespaces (Kubernetes ignores them): a Stream has none, the
// StreamCluster's children are in its namespace, and the record has no
// owner.
//
// # Access as a resource
//
// A StreamAccess, in the application's namespace, asks a StreamCluster
// (spec.clusterRef, admitted by its allowedNamespaces as a Stream is) for
// a bearer token limited to spec.scopes (read, write; never admin) on the
// streams under spec.prefixes: every scope on every prefix, rendered as a
// token file's scope items ("read:shop/,write:shop/"). The cluster must
// have spec.auth (otherwise Ready False, AuthNotEnabled: its brokers
// check no token).
//
// Two Secrets hold the token (streamaccess_controller.go):
//
//   - <cluster>-access-tokens, in the cluster's namespace, owned by the
//     StreamCluster: one key per StreamAccess, access.<namespace>.<name>,
//     whose value is "<items>:<token>". The brokers' token directory
//     projects it whole (optional, so that its absence never keeps a pod
//     from starting): adding the projection rolled the brokers once, and
//     keys added or removed since reach them with the kubelet's Secret
//     sync (a minute or so), then the brokers' one-second re-read. Each
//     StreamAccess writes its own key with a merge patch of that key
//     alone. It goes with the cluster.
//   - spec.secretName (default metadata.name), in the StreamAccess's
//     namespace, owned by it: token, scopes, url and, with TLS, ca.crt. A
//     Secret of that name that is not the StreamAccess's is left alone
//     (Ready False, SecretConflict).
//
// The token is minted once (32 random bytes, hex) and kept: the
// application's Secret holds it, and the access Secret's key brings it
// back if that Secret is deleted by hand. The annotation
// streams.picomq.io/rotate-token, set to a value other than
// status.rotateToken, mints a new one: the Secret is written first, then
// the key, so the old token is refused once the brokers' volume syncs.
// With spec.tokenFrom the token is the value of a Secret the user
// manages (16 to 4096 bytes, no white space, ':' or ','): the operator
// copies it into the access Secret whenever it changes and writes the
// application's Secret without a token key; a missing Secret or a bad
// value is Ready False (TokenSecretNotFound, TokenInvalid) and revokes
// the token, as does every other refusal (NamespaceNotAllowed,
// AuthNotEnabled, InvalidSpec): no token stays in force for a
// StreamAccess that is not Ready.
//
// Deleting a StreamAccess removes its key (a finalizer) and, through the
// owner reference, its Secret. A key no StreamAccess naming the cluster
// has (its finalizer removed by hand) is pruned at the cluster's next
// reconcile, which a StreamAccess's deletion triggers. Deleting the StreamCluster deletes the
// access Secret with it; its StreamAccesses become Ready False,
// ClusterNotFound, keep their Secrets (the token comes back if a cluster
// of that name returns with spec.auth), and their finalizers never wait
// on a cluster that is gone or going.
//
// # Permissions
//
// The RBAC markers below are the whole permission set of the operator;
// `make manifests` renders them into config/rbac/role.yaml.
package controllers

// +kubebuilder:rbac:groups=streams.picomq.io,resources=streamclusters;streams;streamaccesses,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=streams.picomq.io,resources=streamclusters/status;streams/status;streamaccesses/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=streams.picomq.io,resources=streamclusters/finalizers;streams/finalizers;streamaccesses/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services;configmaps;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods;persistentvolumeclaims,verbs=get;list;watch
// Namespace labels admit Streams to a cluster of another namespace (spec.allowedNamespaces.selector).
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// The operator grants the brokers' Role these verbs on Leases, so it must hold them itself.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
