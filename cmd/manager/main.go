// Command manager runs the PicoMQ operator: a controller-runtime manager
// with leader election (a Lease), metrics and health endpoints, and the
// StreamCluster and Stream controllers.
//
//	go run ./cmd/manager --namespaces=default --resync-period=10m
//
// `make run` runs it against the cluster of the current kubeconfig.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers"
	"github.com/picomq/picomq/controllers/crdapply"
	"github.com/picomq/picomq/controllers/resources"
)

// config is the manager's command line.
type config struct {
	MetricsAddr             string
	ProbeAddr               string
	LeaderElect             bool
	LeaderElectionNamespace string
	Namespaces              []string
	StreamClusterWorkers    int
	StreamWorkers           int
	ResyncPeriod            time.Duration
	BrokerImage             string
	ManageCRDs              bool
	Kubeconfig              string
	Zap                     zap.Options
}

// parseFlags reads the command line; getenv supplies PICOMQ_BROKER_IMAGE
// (the image the operator's own Deployment runs, by default).
func parseFlags(args []string, getenv func(string) string, out io.Writer) (config, error) {
	var c config
	var namespaces string
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.MetricsAddr, "metrics-bind-address", ":8080", "address the Prometheus metrics endpoint binds to; 0 disables it")
	fs.StringVar(&c.ProbeAddr, "health-probe-bind-address", ":8081", "address the /healthz and /readyz endpoints bind to")
	fs.BoolVar(&c.LeaderElect, "leader-elect", false, "elect one active manager through a Lease (set it when running more than one replica)")
	fs.StringVar(&c.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease (default: the manager's own namespace in a cluster)")
	fs.StringVar(&namespaces, "namespaces", "", "comma-separated namespaces to watch; empty watches all")
	fs.IntVar(&c.StreamClusterWorkers, "streamcluster-concurrency", 1, "StreamClusters reconciled at once (MaxConcurrentReconciles)")
	fs.IntVar(&c.StreamWorkers, "stream-concurrency", 4, "Streams reconciled at once (MaxConcurrentReconciles)")
	fs.DurationVar(&c.ResyncPeriod, "resync-period", controllers.DefaultResyncPeriod, "how often an idle StreamCluster or Stream is reconciled again (jittered up to +20%), repairing drift on the brokers")
	defImage := resources.DefaultImage
	if v := getenv("PICOMQ_BROKER_IMAGE"); v != "" {
		defImage = v
	}
	fs.StringVar(&c.BrokerImage, "broker-image", defImage, "broker image of StreamClusters that name none [PICOMQ_BROKER_IMAGE]")
	fs.BoolVar(&c.ManageCRDs, "manage-crds", true, "apply the operator's own CRDs (server-side apply, field manager "+crdapply.FieldManager+") at start, so that upgrading the operator upgrades them; turn off when something else (GitOps) manages the CRDs")
	c.Zap.BindFlags(fs)
	// controller-runtime's own --kubeconfig lives on the standard library's
	// flag.CommandLine, in a package variable that its RegisterFlags
	// writes: this FlagSet keeps its own, read by restConfig, so that two
	// parses (tests run in parallel) share nothing.
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "path to a kubeconfig; empty uses $KUBECONFIG, the in-cluster config, then ~/.kube/config")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, ns := range strings.Split(namespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			c.Namespaces = append(c.Namespaces, ns)
		}
	}
	switch {
	case c.StreamClusterWorkers < 1 || c.StreamWorkers < 1:
		return c, errors.New("--streamcluster-concurrency and --stream-concurrency must be at least 1")
	case c.ResyncPeriod < time.Second:
		return c, errors.New("--resync-period must be at least 1s")
	case c.BrokerImage == "":
		return c, errors.New("--broker-image must not be empty")
	}
	return c, nil
}

// newLogger is the manager's logger: the --zap-* flags, writing to w, with
// durations as Go writes them ("20s", not 20000000000 nanoseconds).
func newLogger(o zap.Options, w io.Writer) logr.Logger {
	o.DestWriter = w
	o.EncoderConfigOptions = append(o.EncoderConfigOptions, func(ec *zapcore.EncoderConfig) {
		ec.EncodeDuration = zapcore.StringDurationEncoder
	})
	return zap.New(zap.UseFlagOptions(&o))
}

func newScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(streamsv1alpha1.AddToScheme(scheme))
	return scheme
}

// applyCRDs applies the CRDs embedded in this binary before the
// controllers start, so that they watch the schema of this version: Helm
// never upgrades a chart's CRDs, and kustomize users may update the image
// alone (controllers/crdapply says more).
func applyCRDs(restCfg *rest.Config) error {
	scheme := runtime.NewScheme()
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	c, err := client.New(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	crds, err := crdapply.Load()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return crdapply.Apply(ctx, c, crds, time.Minute)
}

// restConfig is the API server's address and credentials: --kubeconfig
// when given, else controller-runtime's usual search.
func (c config) restConfig() (*rest.Config, error) {
	if c.Kubeconfig == "" {
		return ctrl.GetConfig()
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: c.Kubeconfig},
		&clientcmd.ConfigOverrides{}).ClientConfig()
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(64)
	}
	ctrl.SetLogger(newLogger(cfg.Zap, os.Stderr))
	log := ctrl.Log.WithName("setup")

	restCfg, err := cfg.restConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager: no API server to talk to:", err)
		os.Exit(1)
	}
	if cfg.ManageCRDs {
		if err := applyCRDs(restCfg); err != nil {
			log.Error(err, "cannot apply the operator's CRDs (--manage-crds=false leaves them to you)")
			os.Exit(1)
		}
		log.Info("CRDs applied", "names", crdapply.Names(), "fieldManager", crdapply.FieldManager)
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                        newScheme(),
		Cache:                         controllers.CacheOptions(cfg.Namespaces),
		Metrics:                       metricsserver.Options{BindAddress: cfg.MetricsAddr},
		HealthProbeBindAddress:        cfg.ProbeAddr,
		LeaderElection:                cfg.LeaderElect,
		LeaderElectionID:              "operator.streams.picomq.io",
		LeaderElectionNamespace:       cfg.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		log.Error(err, "cannot create the manager")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := controllers.Setup(ctx, mgr, controllers.Options{
		ResyncPeriod:             cfg.ResyncPeriod,
		StreamClusterConcurrency: cfg.StreamClusterWorkers,
		StreamConcurrency:        cfg.StreamWorkers,
		BrokerImage:              cfg.BrokerImage,
		// Set from the downward API in config/manager; empty outside a
		// cluster.
		OperatorNamespace: os.Getenv("POD_NAMESPACE"),
	}); err != nil {
		log.Error(err, "cannot set up the controllers")
		os.Exit(1)
	}
	utilruntime.Must(mgr.AddHealthzCheck("healthz", healthz.Ping))
	utilruntime.Must(mgr.AddReadyzCheck("readyz", healthz.Ping))

	log.Info("starting manager", "namespaces", cfg.Namespaces, "leaderElect", cfg.LeaderElect,
		"resyncPeriod", cfg.ResyncPeriod, "brokerImage", cfg.BrokerImage)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
