# PicoMQ — build, generate, test and deploy. `make help` lists the targets.

IMG ?= ghcr.io/picomq/picomq:latest
# controller-gen and kustomize run as Go tools pinned in hack/tools/go.mod:
# no binary is downloaded.
TOOL := go tool -modfile=$(CURDIR)/hack/tools/go.mod
CONTROLLER_GEN := $(TOOL) controller-gen
KUSTOMIZE := $(TOOL) kustomize
KUBECTL ?= kubectl
# envtest's kube-apiserver and etcd: cached per machine, built when they
# cannot be downloaded (hack/envtest-assets.sh).
ENVTEST_ASSETS = $(shell hack/envtest-assets.sh)
# The same folder with kube-controller-manager and kube-scheduler too, for
# the local stack's tests (devstack/...).
CONTROLPLANE_ASSETS = $(shell hack/controlplane-assets.sh)
# helm, for the chart (charts/picomq): built from its Go module once per
# machine and cached (hack/helm.sh prints the binary).
HELM = $(shell hack/helm.sh)
# make chart CHART_VERSION=1.2.3 packages the chart (and sets its
# appVersion, the operator image's default tag) as that version.
CHART_VERSION ?=
# -count=1: several suites run binaries they build themselves (the broker),
# which the test cache cannot see change. -timeout: the cluster's fault
# trials (test/cluster) run 24 three-broker trials, beyond go test's 10
# minutes per package on a busy 2-core machine.
GO_TEST_FLAGS ?= -race -count=1 -timeout 40m

.PHONY: all
all: build

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: ## Generate the CRDs and the operator's ClusterRole.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./api/..." paths="./controllers/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	cp config/crd/bases/*.yaml charts/picomq/crds/
	cp config/rbac/role.yaml charts/picomq/files/manager-role.yaml
	cp config/prometheus/rules/picomq.rules.yaml charts/picomq/files/picomq.rules.yaml
	cp config/grafana/dashboards/*.json charts/picomq/files/dashboards/

.PHONY: generate
generate: ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: fmt
fmt: ## Run gofmt on the module.
	gofmt -l -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: verify-generated
verify-generated: manifests generate ## Fail when generated files are not committed.
	@git diff --exit-code -- api config charts || { echo "generated files are stale: run 'make manifests generate' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- api config charts)" || { git status --porcelain -- api config charts; echo "untracked generated files: commit them"; exit 1; }

.PHONY: verify-fmt
verify-fmt: ## Fail when a Go file is not gofmt-ed.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "run 'make fmt'"; exit 1; }

.PHONY: envtest
envtest: ## Print the folder holding kube-apiserver and etcd for envtest (builds them once).
	@hack/envtest-assets.sh

# prometheus and promtool, for the alert rules' tests (test/monitoring) and
# the e2e alert test: built from the Prometheus Go module once per machine;
# the tests call hack/prometheus.sh themselves.
.PHONY: prometheus
prometheus: ## Print the folder holding prometheus and promtool (builds them once).
	@hack/prometheus.sh

# weed (SeaweedFS), the S3-compatible server of the tiered-storage tests
# (test/s3server): built from its Go module once per machine; the tests
# call hack/seaweedfs.sh themselves.
.PHONY: seaweedfs
seaweedfs: ## Print the folder holding SeaweedFS's weed (builds it once).
	@hack/seaweedfs.sh

# The Durable Streams conformance suite: Node packages pinned by
# test/conformance/package-lock.json, installed with npm ci.
CONFORMANCE_DIR := test/conformance
CONFORMANCE_DEPS := $(CONFORMANCE_DIR)/node_modules/.installed-from-lock

$(CONFORMANCE_DEPS): $(CONFORMANCE_DIR)/package.json $(CONFORMANCE_DIR)/package-lock.json
	cd $(CONFORMANCE_DIR) && npm ci --no-audit --no-fund
	touch $@

.PHONY: conformance-deps
conformance-deps: $(CONFORMANCE_DEPS) ## Install the conformance suite's Node packages from its lock file.

.PHONY: conformance
conformance: $(CONFORMANCE_DEPS) ## Run the Durable Streams conformance suite against a real broker (Node 20).
	$(CONFORMANCE_DIR)/run.sh

# The same suite through a 3-broker cluster (envtest's kube-apiserver for
# the slot Leases): every request goes to a broker drained of its slots, so
# every one is proxied to an owner.
.PHONY: conformance-cluster
conformance-cluster: $(CONFORMANCE_DEPS) ## Run the conformance suite through a 3-broker cluster, every request proxied (Node 20, envtest).
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(CONFORMANCE_DIR)/run.sh --cluster 3

# The browser test (test/browser): headless Chromium runs the npm Durable
# Streams client (installed from the conformance suite's lock file) in a
# page of another origin, against a broker with TLS, HTTP/2 and tokens.
# make test runs it with go test ./...; it skips without Chromium unless
# CI=true or PICOMQ_REQUIRE_BROWSER=1, where it fails.
.PHONY: browser-test
browser-test: $(CONFORMANCE_DEPS) ## Run the browser test alone (headless Chromium, the npm client, a TLS broker).
	hack/chromium.sh install
	go test -count=1 -v ./test/browser

# The SQL engine's PostgreSQL tests run against a throwaway server
# hack/postgres.sh starts around `go test` (installing postgresql with
# apt-get when missing) and stops after; PICOMQ_TEST_POSTGRES_URL, when set,
# names a server to use instead.
# Every go test -fuzz target, briefly in make test (a few seconds each) and
# as long as asked by make fuzz (FUZZTIME=10m make fuzz). Findings land in
# the packages' testdata/fuzz as regression seeds.
.PHONY: fuzz-brief
fuzz-brief: ## Run each fuzz target for 3 s.
	FUZZTIME=3s hack/fuzz.sh

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 1m).
	FUZZTIME=$${FUZZTIME:-1m} hack/fuzz.sh

.PHONY: test
test: manifests generate verify-fmt vet fuzz-brief conformance conformance-cluster ## Run every test (the README's test command).
	hack/chromium.sh install
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" PICOMQ_CONTROLPLANE_ASSETS="$(CONTROLPLANE_ASSETS)" PICOMQ_HELM="$(HELM)" hack/failures.sh hack/postgres.sh run -- go test $(GO_TEST_FLAGS) ./...
	$(MAKE) e2e

# The end-to-end suite on the local stack (picomq dev: needs root and
# iproute2). A step of its own: the stack's load would slow the cluster
# trials if it ran beside them.
.PHONY: e2e
e2e: ## Run the end-to-end suite on a local stack it starts (picomq dev).
	PICOMQ_E2E=1 PICOMQ_CONTROLPLANE_ASSETS="$(CONTROLPLANE_ASSETS)" PICOMQ_HELM="$(HELM)" hack/failures.sh go test $(GO_TEST_FLAGS) ./test/e2e

# The unit tier: -short skips, each saying which tier runs it, every test
# that needs a control plane (envtest), PostgreSQL, Node or a broker binary
# (or re-runs the test binary as a child process).
.PHONY: test-unit
test-unit: ## Run the unit tier (go test -short): no control plane, PostgreSQL, Node or broker binary needed.
	go test -short $(GO_TEST_FLAGS) ./...

##@ Build

.PHONY: build
build: ## Build the operator into bin/.
	go build -o bin/manager ./cmd/manager

# make install-plugin: the CLI as the kubectl plugin (kubectl picomq),
# into PLUGIN_DIR, which must be on $PATH.
PLUGIN_DIR ?= $(HOME)/bin

.PHONY: install-plugin
install-plugin: ## Install the CLI as kubectl-picomq (kubectl picomq) into PLUGIN_DIR (default ~/bin).
	@mkdir -p $(PLUGIN_DIR)
	go build -o $(PLUGIN_DIR)/kubectl-picomq ./cmd/picomq

.PHONY: run
run: manifests generate ## Run the operator against the current kubeconfig.
	go run ./cmd/manager

.PHONY: chart
chart: manifests ## Package the Helm chart (charts/picomq) into dist/, ready for helm push oci://... (CHART_VERSION=x.y.z sets its version).
	$(HELM) lint --strict charts/picomq
	@mkdir -p dist
	$(HELM) package charts/picomq --destination dist $(if $(CHART_VERSION),--version $(CHART_VERSION) --app-version $(CHART_VERSION))

.PHONY: docker-build
docker-build: ## Build the container image (needs a Docker engine).
	docker build -t $(IMG) .

.PHONY: docker-push
docker-push: ## Push the container image.
	docker push $(IMG)

##@ Deployment

.PHONY: install
install: manifests ## Install the CRDs into the current cluster.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply --server-side -f -

.PHONY: uninstall
uninstall: manifests ## Remove the CRDs (and every StreamCluster and Stream!) from the current cluster.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) delete --ignore-not-found -f -

.PHONY: deploy
deploy: manifests ## Deploy the operator with image $(IMG) to the current cluster.
	cd config/manager && $(KUSTOMIZE) edit set image controller=$(IMG)
	$(KUSTOMIZE) build config/default | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: ## Remove the operator from the current cluster.
	$(KUSTOMIZE) build config/default | $(KUBECTL) delete --ignore-not-found -f -
