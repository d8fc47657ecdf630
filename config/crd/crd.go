// Package crd holds the operator's CustomResourceDefinitions as `make
// manifests` writes them (bases/, from api/v1alpha1), embedded so that the
// manager applies the CRDs of its own version at start (controllers/crdapply,
// the manager's --manage-crds): nothing to copy, they cannot drift from the
// YAML kustomize and the Helm chart install.
package crd

import "embed"

// Bases are the CRD manifests, one per file under bases/.
//
//go:embed bases/*.yaml
var Bases embed.FS
