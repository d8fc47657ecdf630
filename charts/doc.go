// Package charts holds the Helm charts (picomq: the operator) and their
// tests: helm lint and helm template over a matrix of values, and the
// chart's default rendering against config/default's (kustomize), so the
// two install paths stay one operator. helm is built from its Go module
// once per machine by hack/helm.sh.
package charts
