package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/picomq/picomq/broker/auth"
	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/errs"
)

// DefaultServer is the broker the CLI talks to when neither --server nor
// PICOMQ_URL says: a broker started with its default --listen.
const DefaultServer = "http://127.0.0.1:4437"

// exitUsage is EX_USAGE, the exit status of a bad command line.
const exitUsage = 64

// usageError is a command line the CLI refuses before asking a broker.
type usageError struct{ error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitError is a failure of the CLI's own with its exit status
// (sysexits.h), where no broker's coded error says one.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// Exit statuses of the CLI's own failures.
const (
	exitUnavailable = 69 // EX_UNAVAILABLE: the stack is not running
	exitNoInput     = 66 // EX_NOINPUT: no such log
	exitNoPerm      = 77 // EX_NOPERM: the broker refused the token
)

// app is one invocation: its streams, its flags, and its broker.
type app struct {
	getenv func(string) string
	in     io.Reader
	out    io.Writer

	server  string
	output  string
	timeout time.Duration
	token   string
	caFile  string

	// The kubectl plugin (kube.go): plugin is set when the binary runs as
	// kubectl-picomq; kf are kubectl's flags and --cluster; kubeResolved
	// is the StreamCluster once resolved.
	ctx          context.Context
	errOut       io.Writer
	plugin       bool
	kf           kubeFlags
	kubeResolved *kube
}

// run executes the command line args and returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, in io.Reader, out, errOut io.Writer) int {
	a := &app{getenv: getenv, in: in, out: out, ctx: ctx, errOut: errOut, plugin: pluginMode(os.Args[0])}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(in)
	root.SetOut(out)
	root.SetErr(errOut)
	err := root.ExecuteContext(ctx)
	if a.kubeResolved != nil {
		a.kubeResolved.close()
	}
	if err == nil {
		return 0
	}
	fmt.Fprintln(errOut, "picomq:", err)
	var u usageError
	if errors.As(err, &u) {
		fmt.Fprintf(errOut, "run '%s --help' for usage\n", a.name())
		return exitUsage
	}
	var e exitError
	if errors.As(err, &e) {
		return e.code
	}
	switch {
	case errors.Is(err, auth.Unauthenticated):
		fmt.Fprintln(errOut, "the broker wants a valid bearer token: give it with --token or $PICOMQ_TOKEN")
		return exitNoPerm
	case errors.Is(err, auth.Forbidden):
		fmt.Fprintln(errOut, "the token given does not have the scope this command needs (read, write or admin)")
		return exitNoPerm
	}
	return errs.ExitCode(err)
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "picomq",
		Short: "PicoMQ's command line: streams, appends and reads against a broker or a cluster",
		Long: "picomq talks to a PicoMQ broker — or any broker of a cluster, which routes each request to its\n" +
			"stream's owner — over the broker's HTTP API. The broker is --server, else $PICOMQ_URL, else " + DefaultServer + ".",
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	if a.plugin {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: a.name()}
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.server, "server", "", "the broker's URL (default $PICOMQ_URL, else "+DefaultServer+")")
	pf.StringVarP(&a.output, "output", "o", "table", "output format: table or json (read also takes raw)")
	pf.StringVar(&a.token, "token", "", "bearer token for a broker that checks tokens (default $PICOMQ_TOKEN)")
	pf.StringVar(&a.caFile, "ca", "", "CA certificate (PEM) to verify an https:// broker with (default $PICOMQ_CA_FILE, else the system's roots)")
	pf.DurationVar(&a.timeout, "timeout", 30*time.Second, "how long one request to the broker may take (tail's waits excepted)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(a.streamsCommand(), a.appendCommand(), a.readCommand(), a.tailCommand(), a.groupsCommand(), a.clusterCommand(), a.signCommand(), a.devCommand())
	a.addPluginCommands(root)
	return root
}

// client is the broker client of the invocation, after checking the
// global flags.
func (a *app) client() (*client.Client, error) {
	if a.output != "table" && a.output != "json" && a.output != "raw" {
		return nil, usagef("--output must be table, json or raw, not %q", a.output)
	}
	if a.timeout <= 0 {
		return nil, usagef("--timeout must be positive, not %s", a.timeout)
	}
	if a.usesKube() && a.server == "" {
		return a.kubeClient()
	}
	server := a.server
	if server == "" {
		server = a.getenv("PICOMQ_URL")
	}
	if server == "" {
		server = DefaultServer
	}
	var opts []client.Option
	token := a.token
	if token == "" {
		token = a.getenv("PICOMQ_TOKEN")
	}
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	caFile := a.caFile
	if caFile == "" {
		caFile = a.getenv("PICOMQ_CA_FILE")
	}
	if caFile != "" {
		conf, err := client.TLSConfigFromCAFile(caFile)
		if err != nil {
			return nil, usageError{fmt.Errorf("--ca: %w", err)}
		}
		opts = append(opts, client.WithTLSConfig(conf))
	}
	c, err := client.New(server, opts...)
	if err != nil {
		return nil, usageError{fmt.Errorf("--server %q: %w", server, err)}
	}
	return c, nil
}

// stream opens the named stream (which must exist) on the invocation's
// broker.
func (a *app) stream(ctx context.Context, name string) (*client.Stream, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	return c.Stream(ctx, name)
}

// call bounds one request by --timeout.
func (a *app) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.timeout)
}

// exactArgs is cobra.ExactArgs whose refusal is a usage error.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %s (%d argument(s)), got %d", cmd.CommandPath(), names, n, len(args))
		}
		return nil
	}
}
