package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/controllers/resources"
	"github.com/picomq/picomq/devstack/stack"
)

// Redacted replaces every token value in a debug bundle.
const Redacted = "<redacted>"

// minSecretLen is the shortest Secret value the redaction looks for:
// shorter ones (a scope such as "read") would blank out ordinary words.
const minSecretLen = 8

// redactor replaces secret values in text.
type redactor struct{ secrets []string }

// add records the values of a token Secret: each value, and the token
// after its scopes (the text after its last ':'), both trimmed.
func (r *redactor) add(values ...string) {
	for _, v := range values {
		v = strings.TrimSpace(v)
		cands := []string{v}
		if i := strings.LastIndexByte(v, ':'); i >= 0 {
			cands = append(cands, strings.TrimSpace(v[i+1:]))
		}
		for _, c := range cands {
			if len(c) >= minSecretLen && !slices.Contains(r.secrets, c) {
				r.secrets = append(r.secrets, c)
			}
		}
	}
	// Longest first: a value that holds a token goes whole.
	sort.SliceStable(r.secrets, func(i, j int) bool { return len(r.secrets[i]) > len(r.secrets[j]) })
}

// redact is text with every secret replaced by Redacted.
func (r *redactor) redact(text []byte) []byte {
	for _, s := range r.secrets {
		text = bytes.ReplaceAll(text, []byte(s), []byte(Redacted))
	}
	return text
}

// bundle is a debug bundle being written: a tar.gz whose every file's
// text goes through the redactor.
type bundle struct {
	tw    *tar.Writer
	r     *redactor
	root  string
	now   time.Time
	notes []string
	// how says where each kind of thing came from (the broker
	// connections, the logs), for notes.txt.
	how map[string]bool
}

func (b *bundle) source(format string, args ...any) {
	if b.how == nil {
		b.how = map[string]bool{}
	}
	b.how[fmt.Sprintf(format, args...)] = true
}

func (b *bundle) file(name string, data []byte) error {
	data = b.r.redact(data)
	if err := b.tw.WriteHeader(&tar.Header{Name: b.root + "/" + name, Mode: 0o644, Size: int64(len(data)), ModTime: b.now, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err := b.tw.Write(data)
	return err
}

func (b *bundle) note(format string, args ...any) {
	b.notes = append(b.notes, fmt.Sprintf(format, args...))
}

// yamlOf is an object as YAML, without managedFields.
func yamlOf(v any) []byte {
	if o, ok := v.(metav1.Object); ok {
		o.SetManagedFields(nil)
	}
	data, err := yaml.Marshal(v)
	if err != nil {
		return []byte("# " + err.Error() + "\n")
	}
	return data
}

func (a *app) debugCommand() *cobra.Command {
	debug := &cobra.Command{
		Use:   "debug",
		Short: "collect what it takes to diagnose a StreamCluster",
	}
	var out, devState string
	var logBytes int64
	bundleCmd := &cobra.Command{
		Use:   "bundle",
		Short: "write a tar.gz of the cluster's objects and statuses, each broker's node status, metrics and log, and the operator's log and metrics, with every token redacted",
		Long: "debug bundle [-o FILE.tar.gz] collects, into one tar.gz: the StreamCluster, its Streams, pods, StatefulSet, Leases\n" +
			"and the namespace's events (YAML; never a Secret), each broker's GET /v1/admin/node and /metrics,\n" +
			"each pod's log (the API server's pod log endpoint; on the dev stack, whose node agent has none,\n" +
			"the log files `picomq dev logs` reads), and the operator's log and metrics. Every value of the\n" +
			"auth Secret, the operator token Secret and the StreamAccess Secrets found in any of it is replaced\n" +
			"with " + Redacted + ". notes.txt says what could not be collected.",
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			k, err := a.needKube(ctx)
			if err != nil {
				return err
			}
			if out == "" {
				out = fmt.Sprintf("picomq-debug-%s-%s.tar.gz", k.sc.Name, time.Now().UTC().Format("20060102T150405Z"))
			}
			if devState == "" {
				devState = stack.DefaultStateDir()
			}
			f, err := os.OpenFile(out, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return exitError{code: 73, err: err} // EX_CANTCREAT
			}
			err = a.writeBundle(ctx, k, f, devState, logBytes)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				os.Remove(out)
				return err
			}
			fmt.Fprintln(a.out, out)
			return nil
		},
	}
	// -o names the archive here (it shadows the global --output, which a
	// bundle does not use).
	bundleCmd.Flags().StringVarP(&out, "output", "o", "", "the archive to write (default picomq-debug-<cluster>-<time>.tar.gz; never overwritten)")
	bundleCmd.Flags().StringVar(&devState, "dev-state-dir", "", "the dev stack's state folder, for logs the API server cannot serve (default "+stack.DefaultStateDir()+")")
	bundleCmd.Flags().Int64Var(&logBytes, "log-bytes", 8<<20, "the last bytes of each container log to keep")
	debug.AddCommand(bundleCmd)
	return debug
}

// secretValues are the values of a Secret, or none when it is missing.
func (k *kube) secretValues(ctx context.Context, ns, name string, keys ...string) ([]string, error) {
	s, err := k.k.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var vals []string
	for key, v := range s.Data {
		if len(keys) == 0 || slices.Contains(keys, key) {
			vals = append(vals, string(v))
		}
	}
	return vals, nil
}

// redactor reads every token the cluster's brokers accept: the auth
// Secret's, the operator's, and the StreamAccess ones (the cluster's
// access Secret, and each StreamAccess's own Secret). A Secret that
// cannot be read fails the bundle: it could not be redacted.
func (k *kube) redactor(ctx context.Context) (*redactor, error) {
	r := &redactor{}
	r.add(k.token)
	ns := k.sc.Namespace
	names := []string{resources.OperatorTokenSecretName(k.sc), resources.AccessTokensSecretName(k.sc)}
	if k.sc.Spec.Auth != nil {
		names = append(names, k.sc.Spec.Auth.SecretName)
	}
	for _, name := range names {
		vals, err := k.secretValues(ctx, ns, name)
		if err != nil {
			return nil, fmt.Errorf("reading Secret %s/%s to redact its tokens: %w", ns, name, err)
		}
		r.add(vals...)
	}
	var access streamsv1alpha1.StreamAccessList
	if err := k.c.List(ctx, &access); err != nil {
		if err = k.c.List(ctx, &access, ctrlclient.InNamespace(ns)); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("listing StreamAccesses to redact their tokens: %w", err)
		}
	}
	for _, sa := range access.Items {
		cns := sa.Spec.ClusterRef.Namespace
		if cns == "" {
			cns = sa.Namespace
		}
		if sa.Status.SecretName == "" || sa.Spec.ClusterRef.Name != k.sc.Name || cns != ns {
			continue
		}
		vals, err := k.secretValues(ctx, sa.Namespace, sa.Status.SecretName, resources.AccessTokenKey)
		if apierrors.IsForbidden(err) {
			// The cluster's access Secret, read above, holds every
			// StreamAccess token of the cluster too.
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading Secret %s/%s to redact its token: %w", sa.Namespace, sa.Status.SecretName, err)
		}
		r.add(vals...)
	}
	return r, nil
}

func (a *app) writeBundle(ctx context.Context, k *kube, w io.Writer, devState string, logBytes int64) error {
	r, err := k.redactor(ctx)
	if err != nil {
		return err
	}
	gz := gzip.NewWriter(w)
	b := &bundle{tw: tar.NewWriter(gz), r: r, now: time.Now(), root: "picomq-debug-" + k.sc.Name}
	if err := a.collect(ctx, k, b, devState, logBytes); err != nil {
		return err
	}
	notes := "kubectl picomq debug bundle of StreamCluster " + k.sc.Namespace + "/" + k.sc.Name + " at " + b.now.UTC().Format(time.RFC3339) + "\n"
	if len(b.how) > 0 {
		notes += "collected:\n- " + strings.Join(slices.Sorted(maps.Keys(b.how)), "\n- ") + "\n"
	}
	if len(b.notes) == 0 {
		notes += "everything was collected\n"
	} else {
		notes += "not collected:\n- " + strings.Join(b.notes, "\n- ") + "\n"
	}
	if err := b.file("notes.txt", []byte(notes)); err != nil {
		return err
	}
	if err := b.tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

func (a *app) collect(ctx context.Context, k *kube, b *bundle, devState string, logBytes int64) error {
	ns := k.sc.Namespace
	sc := k.sc.DeepCopy()
	if err := k.c.Get(ctx, ctrlclient.ObjectKeyFromObject(sc), sc); err != nil {
		b.note("the StreamCluster afresh: %v", err)
	}
	sc.APIVersion, sc.Kind = streamsv1alpha1.GroupVersion.String(), "StreamCluster"
	if err := b.file("cluster/streamcluster.yaml", yamlOf(sc)); err != nil {
		return err
	}
	var streams streamsv1alpha1.StreamList
	if err := k.c.List(ctx, &streams); err != nil {
		if err := k.c.List(ctx, &streams, ctrlclient.InNamespace(ns)); err != nil {
			b.note("Streams: %v", err)
		}
	}
	var mine []any
	for i := range streams.Items {
		s := &streams.Items[i]
		cns := s.Spec.ClusterRef.Namespace
		if cns == "" {
			cns = s.Namespace
		}
		if s.Spec.ClusterRef.Name == sc.Name && cns == ns {
			s.SetManagedFields(nil)
			s.APIVersion, s.Kind = streamsv1alpha1.GroupVersion.String(), "Stream"
			mine = append(mine, s)
		}
	}
	if err := b.file("cluster/streams.yaml", yamlOf(map[string]any{"items": mine})); err != nil {
		return err
	}
	sel := labels.SelectorFromSet(resources.SelectorLabels(sc)).String()
	pods, err := k.k.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		b.note("pods: %v", err)
		pods = &corev1.PodList{}
	}
	for i := range pods.Items {
		pods.Items[i].SetManagedFields(nil)
	}
	if err := b.file("cluster/pods.yaml", yamlOf(pods)); err != nil {
		return err
	}
	if sts, err := k.k.AppsV1().StatefulSets(ns).Get(ctx, resources.StatefulSetName(sc), metav1.GetOptions{}); err == nil {
		if err := b.file("cluster/statefulset.yaml", yamlOf(sts)); err != nil {
			return err
		}
	} else {
		b.note("StatefulSet: %v", err)
	}
	if leases, err := k.k.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: "streams.picomq.io/cluster=" + sc.Name}); err == nil {
		for i := range leases.Items {
			leases.Items[i].SetManagedFields(nil)
		}
		if err := b.file("cluster/leases.yaml", yamlOf(leases)); err != nil {
			return err
		}
	} else {
		b.note("Leases: %v", err)
	}
	if events, err := k.k.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for i := range events.Items {
			events.Items[i].SetManagedFields(nil)
		}
		if err := b.file("cluster/events.yaml", yamlOf(events)); err != nil {
			return err
		}
	} else {
		b.note("events: %v", err)
	}

	logs := &logSource{k: k, devState: devState, max: logBytes}
	for i := range pods.Items {
		p := &pods.Items[i]
		dir := "brokers/" + p.Name + "/"
		e, err := k.pod(ctx, p)
		if err != nil {
			b.note("broker %s: %v", p.Name, err)
		} else {
			b.source("brokers: %s", e.Via)
			if err := a.snapshot(ctx, b, e, dir+"node.json", wire.NodePath); err != nil {
				return err
			}
			if err := a.snapshot(ctx, b, e, dir+"metrics.txt", "/metrics"); err != nil {
				return err
			}
		}
		if err := logs.pod(ctx, b, p, dir); err != nil {
			return err
		}
	}

	ops, err := k.k.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=picomq,app.kubernetes.io/component=operator"})
	if err != nil {
		b.note("the operator's pods: %v", err)
		return nil
	}
	if len(ops.Items) == 0 {
		b.note("the operator: no pod labelled app.kubernetes.io/name=picomq,app.kubernetes.io/component=operator")
	}
	for i := range ops.Items {
		p := &ops.Items[i]
		dir := "operator/" + p.Namespace + "/" + p.Name + "/"
		p.SetManagedFields(nil)
		if err := b.file(dir+"pod.yaml", yamlOf(p)); err != nil {
			return err
		}
		if err := logs.pod(ctx, b, p, dir); err != nil {
			return err
		}
		if err := a.operatorMetrics(ctx, k, b, p, dir); err != nil {
			return err
		}
	}
	return nil
}

// snapshot writes a broker's answer at path to the bundle.
func (a *app) snapshot(ctx context.Context, b *bundle, e endpoint, name, path string) error {
	cctx, cancel := a.call(ctx)
	defer cancel()
	status, data, err := e.do(cctx, http.MethodGet, path, nil)
	switch {
	case err != nil:
		b.note("%s (%s %s, %s): %v", name, e.URL, path, e.Via, err)
		return nil
	case status != http.StatusOK:
		b.note("%s (%s %s): status %d", name, e.URL, path, status)
	}
	return b.file(name, data)
}

// operatorMetrics are the operator's /metrics, on the port its container
// names "metrics" (else 8080, config/manager's --metrics-bind-address).
func (a *app) operatorMetrics(ctx context.Context, k *kube, b *bundle, p *corev1.Pod, dir string) error {
	port := 8080
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == "metrics" || cp.Name == "http-metrics" {
				port = int(cp.ContainerPort)
			}
		}
		for _, arg := range c.Args {
			if v, ok := strings.CutPrefix(arg, "--metrics-bind-address="); ok {
				if i := strings.LastIndexByte(v, ':'); i >= 0 {
					if n, err := strconv.Atoi(v[i+1:]); err == nil && n > 0 {
						port = n
					}
				}
			}
		}
	}
	var base string
	addr := p.Status.PodIP + ":" + strconv.Itoa(port)
	switch {
	case !k.forward && p.Status.PodIP != "" && reachable(ctx, addr):
		base = "http://" + addr
	default:
		local, stop, err := k.portForward(ctx, p.Namespace, p.Name, port)
		if err != nil {
			b.note("the operator's metrics (pod %s/%s port %d): not reachable from here, and the port-forward failed: %v", p.Namespace, p.Name, port, err)
			return nil
		}
		defer stop()
		base = "http://127.0.0.1:" + strconv.Itoa(local)
	}
	e := endpoint{URL: base, Via: "operator"}
	return a.snapshot(ctx, b, e, dir+"metrics.txt", "/metrics")
}

// logSource reads a pod's container logs: through the API server, else
// (the dev stack's node agent serves none) from the dev stack's files.
type logSource struct {
	k        *kube
	devState string
	max      int64
	// dev: the dev stack's state folder when it is the cluster the
	// kubeconfig reaches ("" unknown, "-" not).
	dev string
}

func (l *logSource) devDir() string {
	if l.dev != "" {
		return l.dev
	}
	l.dev = "-"
	st, _, err := stack.ReadState(l.devState)
	if err != nil || st.Kubeconfig == "" {
		return l.dev
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
	if err != nil {
		return l.dev
	}
	if sameServer(cfg.Host, l.k.rest.Host) {
		l.dev = l.devState
	}
	return l.dev
}

// sameServer compares two API server addresses.
func sameServer(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	if err1 != nil || err2 != nil {
		return a == b
	}
	return ua.Host == ub.Host
}

func (l *logSource) pod(ctx context.Context, b *bundle, p *corev1.Pod, dir string) error {
	for _, c := range p.Spec.Containers {
		name := dir + "log-" + c.Name + ".txt"
		data, apiErr := l.fromAPI(ctx, p, c.Name)
		if apiErr == nil {
			b.source("pod logs through the API server")
			if err := b.file(name, data); err != nil {
				return err
			}
			continue
		}
		data, devErr := l.fromDev(p, c.Name)
		if devErr == nil {
			b.source("pod logs from the dev stack's files: the API server's pod log endpoint failed (the dev stack's node agent serves none)")
			if err := b.file(name, data); err != nil {
				return err
			}
			continue
		}
		b.note("log of %s/%s container %s: the API server's pod log endpoint: %v; the dev stack's log files: %v", p.Namespace, p.Name, c.Name, apiErr, devErr)
	}
	return nil
}

func (l *logSource) fromAPI(ctx context.Context, p *corev1.Pod, container string) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	limit := l.max
	return l.k.k.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, LimitBytes: &limit}).DoRaw(cctx)
}

func (l *logSource) fromDev(p *corev1.Pod, container string) ([]byte, error) {
	dir := l.devDir()
	if dir == "-" {
		return nil, errors.New("no dev stack of this cluster at " + l.devState)
	}
	path, err := stack.LogFile(stack.Options{StateDir: dir}, p.Namespace, p.Name, container)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Clean(path))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > l.max {
		if _, err := f.Seek(st.Size()-l.max, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(f)
}
