// Command cluster runs a PicoMQ cluster on loopback for the Durable
// Streams conformance suite (test/conformance/run.sh --cluster N): envtest's
// kube-apiserver for the slot Leases and N brokers (test/clusterharness),
// then drains one broker of its slots (POST /v1/admin/drain) and waits
// until it holds none and the others hold every slot. It prints that
// broker's URL — a broker that owns none of the streams, so every request
// sent to it is proxied to an owner — as the line "url=http://..." on
// standard output (and into -url-file), then runs until SIGTERM, SIGINT or
// the end of its standard input, and stops everything.
//
//	KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh) go run ./test/conformance/cluster -brokers 3
//
// The broker binary is built from ./cmd/broker unless PICOMQ_BROKER_BIN
// names one. The brokers' logs stay under -work (broker-N/broker.log).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/picomq/picomq/test/clusterharness"
)

func main() {
	os.Exit(run())
}

func run() int {
	brokers := flag.Int("brokers", 3, "brokers in the cluster")
	drain := flag.Int("drain", -1, "index of the broker to drain and print (default: the last)")
	slots := flag.Int("slots", 16, "slots of the cluster")
	rf := flag.Int("replication-factor", 2, "replication factor; the brokers that stay must be at least this many, or the drain is refused")
	longPoll := flag.Duration("long-poll-timeout", 500*time.Millisecond, "the brokers' --long-poll-timeout")
	urlFile := flag.String("url-file", "", "also write the drained broker's URL into this file")
	work := flag.String("work", "", "folder for the brokers' data and logs (default: a new temporary folder, removed at the end)")
	exitOnEOF := flag.Bool("exit-on-eof", true, "stop at the end of standard input (run.sh holds it open)")
	logLevel := flag.String("log-level", "info", "the brokers' --log-level")
	flag.Parse()
	if *drain < 0 {
		*drain = *brokers - 1
	}
	if *brokers < 2 || *drain >= *brokers {
		fmt.Fprintf(os.Stderr, "conformance-cluster: -brokers %d -drain %d: need at least 2 brokers and a broker to drain among them\n", *brokers, *drain)
		return 64
	}
	dir := *work
	if dir == "" {
		d, err := os.MkdirTemp("", "picomq-conformance-cluster-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "conformance-cluster:", err)
			return 1
		}
		defer os.RemoveAll(d)
		dir = d
	}
	t := clusterharness.NewProgramTB("conformance-cluster", dir)
	defer t.RunCleanups()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if *exitOnEOF {
		ctx = untilEOF(ctx, os.Stdin)
	}

	var url string
	err := t.Do(func() error {
		start := time.Now()
		c, err := clusterharness.TryStart(t, clusterharness.Options{
			Brokers: *brokers, Cluster: true, Slots: *slots, ReplicationFactor: *rf, LogLevel: *logLevel,
			ExtraFlags: []string{"--long-poll-timeout", longPoll.String(), "--shutdown-timeout", "2s"},
		})
		if err != nil {
			return err
		}
		if err := c.CordonAndWait(*drain, 60*time.Second); err != nil {
			return fmt.Errorf("%v\n%s", err, c.LogTails(4096))
		}
		url = c.URL(*drain)
		fmt.Fprintf(os.Stderr, "conformance-cluster: %d brokers ready in %v; broker-%d cordoned, drained of its slots (the others hold all %d): every request to %s is proxied\n",
			*brokers, time.Since(start).Round(time.Millisecond), *drain, *slots, url)
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance-cluster:", err)
		return 1
	}
	if *urlFile != "" {
		if err := os.WriteFile(*urlFile, []byte(url+"\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "conformance-cluster:", err)
			return 1
		}
	}
	fmt.Printf("url=%s\n", url)
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "conformance-cluster: stopping")
	return 0
}

// untilEOF returns a context that ends with parent or when r reaches its
// end (the caller closed it, or went away).
func untilEOF(parent context.Context, r io.Reader) context.Context {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		defer cancel()
		_, _ = io.Copy(io.Discard, r)
	}()
	return ctx
}
