package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/resources"
	"github.com/picomq/picomq/devstack/stack"
	"github.com/picomq/picomq/internal/testwait"
)

// TestPrometheusAlertsOnAStoppedBroker runs a real Prometheus (built by
// hack/prometheus.sh) scraping the stack's brokers, as the operator's
// ServiceMonitor says (its path, scheme and port, at the pods' addresses),
// and the operator, with config/prometheus/rules loaded (a copy whose
// `for` are 2s, evaluated every second). One broker is stopped (SIGSTOP:
// its pod stays, it answers nothing): PicoMQBrokerDown fires for it
// through Prometheus's HTTP API, and clears once it runs again (SIGCONT).
func TestPrometheusAlertsOnAStoppedBroker(t *testing.T) {
	promDir := prometheusTools(t)
	ctx := context.Background()
	waitClusterReady(t, 2*time.Minute)

	// The scrape the operator renders for this cluster.
	var c streamsv1alpha1.StreamCluster
	if err := json.Unmarshal([]byte(mustKubectl(t, "", "get", "streamcluster", stack.SampleCluster, "-n", stack.SampleNamespace, "-o", "json")), &c); err != nil {
		t.Fatal(err)
	}
	sm := resources.ServiceMonitor(&c)
	endpoints, _, _ := unstructuredSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints %v", endpoints)
	}
	ep := endpoints[0].(map[string]any)
	path, scheme, portName := ep["path"].(string), ep["scheme"].(string), ep["port"].(string)
	if scheme != "http" {
		t.Skipf("the stack's cluster is scraped over %s: this test reads the plain sample", scheme)
	}
	var brokers []string
	addrOf := map[string]string{} // pod → target
	for _, p := range brokerPods(t) {
		port := 0
		for _, ct := range p.Spec.Containers {
			for _, cp := range ct.Ports {
				if cp.Name == portName {
					port = int(cp.ContainerPort)
				}
			}
		}
		if port == 0 || p.Status.PodIP == "" {
			t.Fatalf("pod %s: no %q port or address", p.Name, portName)
		}
		addr := net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port))
		brokers = append(brokers, addr)
		addrOf[p.Name] = addr
	}
	// The stack's operator: a ready pod (another test may have scaled it
	// down and up again, leaving one terminating).
	var operator string
	testwait.NoError(t, 2*time.Minute, "a ready operator pod", func() error {
		ops, err := env.k.CoreV1().Pods("picomq-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=operator"})
		if err != nil {
			return err
		}
		for i := range ops.Items {
			if p := &ops.Items[i]; p.DeletionTimestamp == nil && p.Status.PodIP != "" && podReady(p) {
				operator = net.JoinHostPort(p.Status.PodIP, "8080")
				return nil
			}
		}
		return fmt.Errorf("none of %d", len(ops.Items))
	})

	// The rules, with every `for` shortened.
	dir := t.TempDir()
	raw, err := os.ReadFile("../../config/prometheus/rules/picomq.rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules map[string]any
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			if _, ok := r.(map[string]any)["for"]; ok {
				r.(map[string]any)["for"] = "2s"
			}
		}
	}
	writeYAML(t, filepath.Join(dir, "rules.yaml"), rules)
	job := resources.HeadlessServiceName(&c)
	writeYAML(t, filepath.Join(dir, "prometheus.yml"), map[string]any{
		"global":     map[string]any{"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
		"rule_files": []any{filepath.Join(dir, "rules.yaml")},
		"scrape_configs": []any{
			map[string]any{"job_name": job, "metrics_path": path, "scheme": scheme,
				"static_configs": []any{map[string]any{"targets": brokers, "labels": map[string]any{"namespace": c.Namespace}}}},
			map[string]any{"job_name": "picomq-operator", "metrics_path": "/metrics",
				"static_configs": []any{map[string]any{"targets": []any{operator}, "labels": map[string]any{"namespace": "picomq-system"}}}},
		},
	})

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	l.Close()
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	prom := exec.Command(filepath.Join(promDir, "prometheus"),
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen)
	prom.Stdout, prom.Stderr = logFile, logFile
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = prom.Process.Signal(syscall.SIGTERM)
		_ = prom.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Logf("prometheus log:\n%s", b)
		}
	})
	api := "http://" + listen

	start := time.Now()
	testwait.NoError(t, time.Minute, "every broker and the operator scraped, up", func() error {
		v, err := promQuery(api, `up`)
		if err != nil {
			return err
		}
		if len(v) != len(brokers)+1 {
			return fmt.Errorf("%d up series, want %d", len(v), len(brokers)+1)
		}
		for _, s := range v {
			if s.Value[1] != "1" {
				return fmt.Errorf("%v is %v", s.Metric, s.Value[1])
			}
		}
		return nil
	})
	t.Logf("all %d targets up after %v", len(brokers)+1, time.Since(start).Round(time.Millisecond))
	if a := brokerDownAlerts(t, api); len(a) != 0 {
		t.Fatalf("PicoMQBrokerDown before any fault: %v", a)
	}

	victim := brokerPods(t)[2]
	pid := containerPID(t, stack.SampleNamespace, victim.Name, "broker")
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer resume()
	stopped := time.Now()
	testwait.NoError(t, time.Minute, "PicoMQBrokerDown firing for "+victim.Name, func() error {
		for _, a := range brokerDownAlerts(t, api) {
			if a.Labels["instance"] == addrOf[victim.Name] && a.Labels["job"] == job && a.State == "firing" {
				return nil
			}
		}
		return fmt.Errorf("alerts %v", brokerDownAlerts(t, api))
	})
	t.Logf("PicoMQBrokerDown firing %v after the broker stopped", time.Since(stopped).Round(time.Millisecond))
	resume()
	cont := time.Now()
	testwait.NoError(t, 2*time.Minute, "PicoMQBrokerDown cleared", func() error {
		if a := brokerDownAlerts(t, api); len(a) != 0 {
			return fmt.Errorf("alerts %v", a)
		}
		return nil
	})
	t.Logf("PicoMQBrokerDown cleared %v after the broker resumed", time.Since(cont).Round(time.Millisecond))
	waitClusterReady(t, 2*time.Minute)
}

// prometheusTools is hack/prometheus.sh's folder (built once per machine):
// the test fails without it under CI=true, else skips.
func prometheusTools(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("../../hack/prometheus.sh")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("hack/prometheus.sh: %v", err)
		}
		t.Skipf("hack/prometheus.sh could not provide prometheus: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func unstructuredSlice(obj map[string]any, fields ...string) ([]any, bool, error) {
	var cur any = obj
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, fmt.Errorf("%s: not an object", f)
		}
		cur = m[f]
	}
	s, ok := cur.([]any)
	return s, ok, nil
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func promQuery(api, q string) ([]promSample, error) {
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []promSample `json:"result"`
		} `json:"data"`
	}
	if err := getJSON(api+"/api/v1/query?query="+url.QueryEscape(q), &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, r.Status)
	}
	return r.Data.Result, nil
}

type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

func brokerDownAlerts(t *testing.T, api string) []promAlert {
	t.Helper()
	var r struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	if err := getJSON(api+"/api/v1/alerts", &r); err != nil {
		t.Logf("GET /api/v1/alerts: %v", err)
		return []promAlert{{State: "unknown"}}
	}
	var out []promAlert
	for _, a := range r.Data.Alerts {
		if a.Labels["alertname"] == "PicoMQBrokerDown" {
			out = append(out, a)
		}
	}
	return out
}

func getJSON(u string, into any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(into)
}
