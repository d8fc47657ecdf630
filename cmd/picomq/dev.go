package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/picomq/picomq/devstack/nodeagent"
	"github.com/picomq/picomq/devstack/podinit"
	"github.com/picomq/picomq/devstack/podnet"
	"github.com/picomq/picomq/devstack/stack"
)

// devCommand is `picomq dev`: the local stack.
func (a *app) devCommand() *cobra.Command {
	var o stack.Options
	dev := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole product on this machine: a control plane, a node agent, the operator and a StreamCluster",
		Long: "picomq dev runs a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,\n" +
			"kube-scheduler, built from Go modules once per machine), a node agent that runs pods as local\n" +
			"processes in network namespaces of their own, the operator (config/default) and the samples\n" +
			"(config/samples: a StreamCluster of --brokers brokers and its Streams). It needs root (network\n" +
			"namespaces, veth links on 198.18.0.0/15, mount namespaces) and iproute2. State is kept in\n" +
			"--state-dir across runs.",
	}
	pf := dev.PersistentFlags()
	pf.StringVar(&o.StateDir, "state-dir", "", "the stack's state folder (default "+stack.DefaultStateDir()+")")
	dev.AddCommand(a.devUpCommand(&o), a.devDownCommand(&o), a.devStatusCommand(&o), a.devLogsCommand(&o),
		devAgentCommand(), devPodInitCommand())
	return dev
}

func (a *app) devUpCommand(o *stack.Options) *cobra.Command {
	var foreground bool
	var built, checkout string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Build what is missing, start the stack, wait until the StreamCluster and Streams are Ready, print the exports",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if checkout == "" {
				wd, err := os.Getwd()
				if err != nil {
					return err
				}
				if checkout, err = stack.FindCheckout(wd); err != nil {
					return usageError{err}
				}
			}
			o.Checkout = checkout
			errOut := cmd.ErrOrStderr()
			if !foreground {
				return stack.Up(cmd.Context(), *o, a.out, errOut)
			}
			if built == "" {
				var err error
				if built, err = stack.Build(cmd.Context(), *o, errOut); err != nil {
					return err
				}
			}
			return stack.Run(cmd.Context(), *o, built, errOut)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Brokers, "brokers", 3, "brokers of the sample StreamCluster (applied by the first up of a state folder; later ones keep the cluster as it is)")
	f.IntVar(&o.Nodes, "nodes", 3, "nodes the node agent registers")
	f.IntVar(&o.Port, "port", 0, "host loopback port serving the client Service (default 4437 when free, else any)")
	f.BoolVar(&foreground, "foreground", false, "run the supervisor in this process until interrupted, instead of in the background")
	f.StringVar(&checkout, "checkout", "", "the PicoMQ source tree to build from (default: the one holding the working directory)")
	f.StringVar(&built, "built", "", "the control plane's binaries, already built (the background supervisor's own flag)")
	_ = f.MarkHidden("built")
	return cmd
}

func (a *app) devDownCommand(o *stack.Options) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Stop everything the stack started (its state folder is kept)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return stack.Down(*o, cmd.ErrOrStderr())
		},
	}
}

func (a *app) devStatusCommand(o *stack.Options) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show whether the stack runs, its exports, nodes, pods, StreamClusters and Streams",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := stack.Status(cmd.Context(), *o, a.out)
			if errors.Is(err, stack.ErrNotRunning) {
				return exitError{code: exitUnavailable, err: err}
			}
			return err
		},
	}
}

func (a *app) devLogsCommand(o *stack.Options) *cobra.Command {
	var namespace, container string
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs POD|supervisor|agent|etcd|kube-apiserver|kube-controller-manager|kube-scheduler",
		Short: "Print a pod's container log (kept across restarts), or one of the stack's own",
		Args:  exactArgs(1, "a pod or component name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := stack.LogFile(*o, namespace, args[0], container)
			if err != nil {
				return exitError{code: exitNoInput, err: err}
			}
			return printFile(cmd.Context(), path, follow, a.out)
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "default", "the pod's namespace")
	cmd.Flags().StringVarP(&container, "container", "c", "", "the container (needed when the pod has several)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing what is appended until interrupted")
	return cmd
}

// printFile copies path to out, following it when asked.
func printFile(ctx context.Context, path string, follow bool, out io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		if _, err := io.Copy(out, f); err != nil {
			return err
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// devAgentCommand is the node agent the supervisor starts in the pod
// network's router namespace.
func devAgentCommand() *cobra.Command {
	var stateDir, kubeconfig, nodeIP, podCIDR, images, apiServer, helper string
	var nodes int
	cmd := &cobra.Command{
		Use:    "agent",
		Short:  "The local stack's node agent (started by the supervisor)",
		Hidden: true,
		Args:   exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return err
			}
			cfg.QPS, cfg.Burst = 50, 100
			k, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			cidr, err := netip.ParsePrefix(podCIDR)
			if err != nil {
				return usagef("--pod-cidr: %v", err)
			}
			imageDirs := map[string]string{}
			for _, kv := range strings.Split(images, ",") {
				repo, dir, ok := strings.Cut(kv, "=")
				if !ok {
					return usagef("--images wants repository=folder, not %q", kv)
				}
				imageDirs[repo] = dir
			}
			host, port, err := net.SplitHostPort(apiServer)
			if err != nil {
				return usagef("--api-server wants host:port: %v", err)
			}
			names := make([]string, nodes)
			for i := range names {
				names[i] = "picomq-dev-" + strconv.Itoa(i)
			}
			log := funcr.NewJSON(func(obj string) {
				fmt.Fprintln(cmd.ErrOrStderr(), obj)
			}, funcr.Options{LogTimestamp: true})
			return nodeagent.Run(cmd.Context(), nodeagent.Options{
				Client: k, Nodes: names, NodeIP: nodeIP, Dir: stateDir,
				Images: imageDirs, PodIPs: cidr, DNS: nodeIP,
				APIServerHost: host, APIServerPort: port,
				Helper: []string{helper, "dev", "pod-init"}, ImageUser: 65532,
				AddServiceAddress: podnet.AddLocalAddress,
				Logger:            log,
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&stateDir, "state-dir", "", "the agent's state folder")
	f.StringVar(&kubeconfig, "kubeconfig", "", "the agent's kubeconfig")
	f.IntVar(&nodes, "nodes", 3, "nodes to register")
	f.StringVar(&nodeIP, "node-ip", "", "the nodes' address, where the agent also serves cluster DNS")
	f.StringVar(&podCIDR, "pod-cidr", "", "the pods' addresses")
	f.StringVar(&images, "images", "", "repository=folder of its binaries, comma-separated")
	f.StringVar(&apiServer, "api-server", "", "host:port the pods reach the API server at")
	f.StringVar(&helper, "helper", "", "the picomq binary that runs `dev pod-init`")
	return cmd
}

// devPodInitCommand prepares a container's namespace and executes it.
func devPodInitCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "pod-init SPEC",
		Short:  "Start a container of the local stack (the node agent runs it)",
		Hidden: true,
		Args:   exactArgs(1, "a spec file"),
		RunE: func(_ *cobra.Command, args []string) error {
			return podinit.Main(args[0]) // returns only on failure
		},
	}
}
