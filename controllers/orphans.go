package controllers

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/brokeradmin"
	"github.com/picomq/picomq/controllers/resources"
)

// A Stream deleted (deletionPolicy Delete) while its StreamCluster is gone
// is released at once — waiting would block the namespace's deletion for
// good — but its broker stream is still on the cluster's claims, which
// outlive the cluster: re-created with the same name, the cluster would
// serve it again. So the operator records the stream in a ConfigMap of the
// cluster's namespace (which may not be the Stream's),
// <cluster>-deleted-streams, and deletes it from the brokers once a
// StreamCluster of that name runs again; a Stream created for the same
// name in the meantime, in any namespace, keeps it.

// deletedStreamsKey is the ConfigMap key listing the streams, one per
// line (stream names hold '/', which ConfigMap keys may not).
const deletedStreamsKey = "streams"

// deletedStreamsName is the ConfigMap recording cluster's streams to delete.
func deletedStreamsName(cluster string) string { return cluster + "-deleted-streams" }

// recordDeletedStream adds name to the streams to delete from cluster's
// brokers when the cluster returns.
func (r *StreamReconciler) recordDeletedStream(ctx context.Context, namespace, cluster, name string) error {
	key := client.ObjectKey{Namespace: namespace, Name: deletedStreamsName(cluster)}
	var cm corev1.ConfigMap
	switch err := r.Client.Get(ctx, key, &cm); {
	case apierrors.IsNotFound(err):
		cm = corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: namespace, Name: key.Name,
				// The managed-by label puts it in the operator's cache; no
				// owner: the cluster it waits for does not exist.
				Labels: map[string]string{
					resources.LabelManagedBy: resources.ManagedByValue,
					resources.LabelInstance:  cluster,
					resources.LabelPartOf:    resources.NameValue,
				},
				Annotations: map[string]string{
					"streams.picomq.io/description": "streams whose Stream was deleted while StreamCluster " + cluster +
						" was gone: the operator deletes them from its brokers when it runs again",
				},
			},
			Data: map[string]string{deletedStreamsKey: name},
		}
		return r.Client.Create(ctx, &cm)
	case err != nil:
		return err
	}
	names := deletedStreams(&cm)
	if slices.Contains(names, name) {
		return nil
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[deletedStreamsKey] = strings.Join(slices.Sorted(slices.Values(append(names, name))), "\n")
	return r.Client.Update(ctx, &cm) // a Conflict retries the finalizer
}

// deletedStreams reads the list.
func deletedStreams(cm *corev1.ConfigMap) []string {
	var out []string
	for _, n := range strings.Split(cm.Data[deletedStreamsKey], "\n") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// deleteRecordedStreams deletes, from the brokers of c, the streams
// recorded while a cluster of its name was gone, except those a Stream of
// c names again (it manages them now). A broker that fails leaves the
// stream recorded for the next reconcile; the record goes when it is empty.
func (r *StreamClusterReconciler) deleteRecordedStreams(ctx context.Context, c *streamsv1alpha1.StreamCluster, creds brokeradmin.Credentials) error {
	var cm corev1.ConfigMap
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: deletedStreamsName(c.Name)}, &cm); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	streams, err := streamsNaming(ctx, r.Client, c.Namespace, c.Name)
	if err != nil {
		return err
	}
	claimed := map[string]bool{}
	for i := range streams {
		claimed[streams[i].StreamName()] = true
	}
	endpoint := clusterAdminEndpoint(c)
	admin, err := r.Options.StreamAdmins.For(endpoint, creds)
	if err != nil {
		return err
	}
	var left []string
	for _, name := range deletedStreams(&cm) {
		if claimed[name] {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, r.Options.BrokerCallTimeout)
		err := admin.DeleteStream(cctx, name)
		cancel()
		switch {
		case err == nil:
			event(r.Recorder, c, eventNormal, "StreamDeleted", "Delete",
				"deleted stream %s from the brokers: its Stream was deleted (deletionPolicy Delete) while the cluster was gone", name)
		case brokeradmin.IsNotFound(err):
		default:
			ctrl.LoggerFrom(ctx).Info("cannot delete a stream recorded while the cluster was gone; retrying later", "stream", name, "error", err.Error())
			left = append(left, name)
		}
	}
	if len(left) == 0 {
		return client.IgnoreNotFound(r.Client.Delete(ctx, &cm, client.Preconditions{ResourceVersion: &cm.ResourceVersion}))
	}
	cm.Data[deletedStreamsKey] = strings.Join(left, "\n")
	return r.Client.Update(ctx, &cm)
}

// clusterAdminEndpoint is the base URL of c's admin API: its admin-url
// annotation, else the client Service.
func clusterAdminEndpoint(c *streamsv1alpha1.StreamCluster) string {
	if u := c.Annotations[AnnotationAdminURL]; u != "" {
		return u
	}
	return resources.Endpoint(c)
}
