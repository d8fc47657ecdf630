package resources

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// typeMeta is set on every built object: server-side apply needs the
// apiVersion and kind in the body.
func typeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}
