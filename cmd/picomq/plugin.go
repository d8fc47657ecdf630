package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/membership"
	"github.com/picomq/picomq/broker/stream"
)

// name is the command as the user typed it.
func (a *app) name() string {
	if a.plugin {
		return "kubectl picomq"
	}
	return "picomq"
}

// addPluginCommands adds kubectl's flags and the verbs that act on a
// StreamCluster's brokers (drain, undrain, recover, debug).
func (a *app) addPluginCommands(root *cobra.Command) {
	pf := root.PersistentFlags()
	pf.StringVar(&a.kf.cluster, "cluster", "", "the StreamCluster to reach through the kubeconfig (as kubectl-picomq: default the namespace's only one)")
	pf.StringVar(&a.kf.kubeconfig, "kubeconfig", "", "with --cluster: the kubeconfig (default $KUBECONFIG, else ~/.kube/config)")
	pf.StringVar(&a.kf.context, "context", "", "with --cluster: the kubeconfig context (default its current one)")
	pf.StringVarP(&a.kf.namespace, "namespace", "n", "", "with --cluster: the StreamCluster's namespace (default the context's)")
	pf.BoolVar(&a.kf.forward, "port-forward", false, "with --cluster: reach the brokers only through port-forwards by the API server, even where their addresses are reachable")
	root.AddCommand(a.drainCommand(), a.undrainCommand(), a.recoverCommand(), a.debugCommand())
}

// needKube resolves the StreamCluster for a verb that only works through
// the kubeconfig.
func (a *app) needKube(ctx context.Context) (*kube, error) {
	if !a.usesKube() {
		return nil, usagef("this command resolves a StreamCluster through the kubeconfig: name it with --cluster (or run it as kubectl picomq)")
	}
	return a.kube(ctx)
}

// kubeClient is the broker client of a StreamCluster resolved through the
// kubeconfig: its client Service, or a broker pod.
func (a *app) kubeClient() (*client.Client, error) {
	ctx := a.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	k, err := a.kube(ctx)
	if err != nil {
		return nil, err
	}
	e, err := k.service(ctx)
	if err != nil {
		return nil, err
	}
	opts := []client.Option{client.WithToken(e.token)}
	if c := e.tlsConfig(); c != nil {
		opts = append(opts, client.WithTLSConfig(c))
	}
	return client.New(e.URL, opts...)
}

// refusal is a broker's answer other than 2xx as an error: its coded
// problem when it sent one.
func refusal(op string, status int, body []byte) error {
	if e, err := errs.Unmarshal(body); err == nil {
		return e
	}
	text := strings.TrimSpace(string(body))
	if len(text) > 200 {
		text = text[:200] + "..."
	}
	return stream.StreamBackendFailed.With("op", op, "status", status, "body", text)
}

func (a *app) drainCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "drain BROKER",
		Short: "cordon a broker (pod name or ordinal): it hands its slots to the others and stays a member until undrain",
		Long: "drain asks the broker (POST /v1/admin/drain {\"stay\":true}) to take no slot and hand those it holds to the\n" +
			"other brokers, staying a member of the cluster, for maintenance. undrain takes it back. A scale-down is\n" +
			"spec.replicas, not this: the operator drains the departing brokers itself. Note that the operator cancels\n" +
			"the drain of a broker that stays (ordinal below spec.replicas) when it next reconciles the StreamCluster.",
		Args: exactArgs(1, "a broker"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.drainCall(cmd.Context(), args[0], http.MethodPost)
		},
	}
}

func (a *app) undrainCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "undrain BROKER",
		Short: "cancel a broker's drain (pod name or ordinal): it takes its share of the slots back",
		Args:  exactArgs(1, "a broker"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.drainCall(cmd.Context(), args[0], http.MethodDelete)
		},
	}
}

func (a *app) drainCall(ctx context.Context, broker, method string) error {
	if a.output != "table" && a.output != "json" {
		return usagef("--output must be table or json, not %q", a.output)
	}
	k, err := a.needKube(ctx)
	if err != nil {
		return err
	}
	pod, err := brokerPodName(k.sc.Name, broker)
	if err != nil {
		return err
	}
	e, err := k.brokerPod(ctx, pod)
	if err != nil {
		return err
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	var body *bytes.Reader
	if method == http.MethodPost {
		body = bytes.NewReader([]byte(`{"stay":true}`))
	}
	var status int
	var data []byte
	if body != nil {
		status, data, err = e.do(cctx, method, wire.DrainPath, body)
	} else {
		status, data, err = e.do(cctx, method, wire.DrainPath, nil)
	}
	if err != nil {
		return exitError{code: exitUnavailable, err: fmt.Errorf("broker %s (%s, %s): %w", pod, e.URL, e.Via, err)}
	}
	if status/100 != 2 {
		return refusal("admin.drain", status, data)
	}
	var d wire.DrainStatus
	if err := json.Unmarshal(data, &d); err != nil {
		return fmt.Errorf("broker %s: drain answer: %w", pod, err)
	}
	if a.output == "json" {
		return a.json(struct {
			Broker string `json:"broker"`
			wire.DrainStatus
		}{pod, d})
	}
	fmt.Fprintf(a.out, "%s: %s\n", pod, drainLine(d))
	return nil
}

// drainLine is a drain's state in one line.
func drainLine(d wire.DrainStatus) string {
	if d.Phase == wire.DrainNone {
		return "not draining (a full member)"
	}
	s := fmt.Sprintf("%s: %d slots held, %d open streams, %d objects (%d bytes) held", d.Phase, d.SlotsHeld, d.OpenStreams, d.ObjectsHeld, d.BytesHeld)
	if d.Message != "" {
		s += ": " + d.Message
	}
	return s
}

func (a *app) recoverCommand() *cobra.Command {
	var voters []string
	var yes bool
	cmd := &cobra.Command{
		Use:   "recover --voters POD[,POD...]",
		Short: "recover a metadata log whose quorum is lost for good: the surviving voters named form it alone",
		Long: "recover is the README's \"Recovering from a quorum lost for good\": every broker of the cluster that\n" +
			"answers must know no metadata leader, each voter named must answer, be a voter of the log and not be\n" +
			"removed; then, after a confirmation (--yes skips it), each named voter is asked (POST /v1/admin/recover)\n" +
			"with the same list. Whatever only the lost voters held is gone; a lost broker may come back only with\n" +
			"its data wiped (delete its PVC, then its pod).",
		Args: exactArgs(0, "no arguments (the survivors are --voters)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			k, err := a.needKube(ctx)
			if err != nil {
				return err
			}
			if len(voters) == 0 {
				return usagef("--voters names the surviving voters (pod names or ordinals)")
			}
			names := make([]string, 0, len(voters))
			for _, v := range voters {
				pod, err := brokerPodName(k.sc.Name, v)
				if err != nil {
					return err
				}
				names = append(names, pod)
			}
			pods, err := k.pods(ctx)
			if err != nil {
				return err
			}
			nodes := map[string]wire.NodeInfo{}
			eps := map[string]endpoint{}
			unreached := map[string]string{}
			for i := range pods {
				p := &pods[i]
				e, err := k.pod(ctx, p)
				if err == nil {
					var n wire.NodeInfo
					if n, err = nodeOf(ctx, a, e); err == nil {
						nodes[p.Name], eps[p.Name] = n, e
						continue
					}
				}
				unreached[p.Name] = err.Error()
			}
			remove, err := recoveryPlan(names, nodes, unreached)
			if err != nil {
				return exitError{code: 75, err: err}
			}
			fmt.Fprintf(a.out, "StreamCluster %s/%s: no broker that answers knows a metadata leader.\n", k.sc.Namespace, k.sc.Name)
			fmt.Fprintf(a.out, "The metadata log will be formed by %s alone; recorded as removed: %s.\n", strings.Join(names, ", "), orDash(strings.Join(remove, ", ")))
			fmt.Fprintln(a.out, "Whatever only the removed members held is lost; a removed broker may come back only with its PVC deleted.")
			if !yes {
				if !isTerminal(a.in) {
					return usagef("recover asks for a confirmation on a terminal: give --yes to recover without one")
				}
				fmt.Fprintf(a.out, "Type the StreamCluster's name (%s) to recover: ", k.sc.Name)
				line, _ := bufio.NewReader(a.in).ReadString('\n')
				if strings.TrimSpace(line) != k.sc.Name {
					return exitError{code: 1, err: fmt.Errorf("not confirmed: nothing was asked")}
				}
			}
			body, _ := json.Marshal(membership.RecoveryRequest{Voters: names})
			var failed []string
			for _, pod := range names {
				cctx, cancel := a.call(ctx)
				status, data, err := eps[pod].do(cctx, http.MethodPost, membership.RecoverPath, bytes.NewReader(body))
				cancel()
				switch {
				case err != nil:
					failed = append(failed, fmt.Sprintf("%s: %v", pod, err))
				case status/100 != 2:
					failed = append(failed, fmt.Sprintf("%s: %v", pod, refusal("admin.recover", status, data)))
				default:
					fmt.Fprintf(a.out, "%s: %d %s\n", pod, status, strings.TrimSpace(string(data)))
				}
			}
			if len(failed) > 0 {
				return fmt.Errorf("recovery not asked of every survivor (ask them again with the same --voters): %s", strings.Join(failed, "; "))
			}
			fmt.Fprintln(a.out, "Each survivor restarts in place and the survivors form the log; watch `kubectl get strc` for Ready.")
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&voters, "voters", nil, "the surviving voters, pod names or ordinals (every one is asked, with the same list)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "recover without asking for a confirmation")
	return cmd
}

// nodeOf is a broker's node status.
func nodeOf(ctx context.Context, a *app, e endpoint) (wire.NodeInfo, error) {
	cctx, cancel := a.call(ctx)
	defer cancel()
	var n wire.NodeInfo
	status, data, err := e.do(cctx, http.MethodGet, wire.NodePath, nil)
	if err != nil {
		return n, err
	}
	if status != http.StatusOK {
		return n, refusal("admin.node", status, data)
	}
	return n, json.Unmarshal(data, &n)
}

// memberNode is the node name (pod) of a member id (demo-0~3f9a2c1e).
func memberNode(id string) string {
	node, _, _ := strings.Cut(id, "~")
	return node
}

// recoveryPlan checks the README's conditions of a recovery from a lost
// quorum against what the brokers answered (nodes, by pod; unreached:
// the pods that did not answer, with why) and returns the members that
// will be recorded as removed.
func recoveryPlan(survivors []string, nodes map[string]wire.NodeInfo, unreached map[string]string) ([]string, error) {
	seen := map[string]bool{}
	for _, s := range survivors {
		if seen[s] {
			return nil, fmt.Errorf("--voters names %s twice", s)
		}
		seen[s] = true
	}
	for _, pod := range slices.Sorted(maps.Keys(nodes)) {
		n := nodes[pod]
		if n.Leader != "" {
			return nil, fmt.Errorf("refused: broker %s knows a metadata leader (%s): the quorum is not lost", pod, n.Leader)
		}
	}
	var voters []string
	for _, s := range survivors {
		n, ok := nodes[s]
		if !ok {
			why := unreached[s]
			if why == "" {
				why = "no such broker pod"
			}
			return nil, fmt.Errorf("refused: survivor %s did not answer (%s): every survivor named must be asked", s, why)
		}
		if n.Removed || n.RaftState == wire.RaftStateRemoved {
			return nil, fmt.Errorf("refused: %s was removed from the cluster: it cannot be a survivor", s)
		}
		if n.ClusterID == "" {
			return nil, fmt.Errorf("refused: %s is a lone broker, not a member of a cluster", s)
		}
		if voters == nil {
			voters = n.Voters
		}
		in := false
		for _, v := range n.Voters {
			in = in || memberNode(v) == s
		}
		if !in {
			return nil, fmt.Errorf("refused: %s is not a voter of the metadata log as it knows it (voters: %s)", s, orDash(strings.Join(n.Voters, ", ")))
		}
	}
	var remove []string
	for _, v := range voters {
		if !seen[memberNode(v)] {
			remove = append(remove, v)
		}
	}
	return remove, nil
}

// isTerminal reports whether r is a terminal (a character device).
func isTerminal(r any) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
