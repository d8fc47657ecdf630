package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/picomq/picomq/broker/core"
)

// config is the broker's configuration, from flags and PICOMQ_* variables.
type config struct {
	DataDir         string
	Listen          string
	NodeID          string
	FlushLinger     time.Duration
	SyncLinger      time.Duration
	MaxBatchBytes   int64
	InlineBytes     int64
	PageCacheBytes  int64
	LongPollTimeout time.Duration
	MaxBodyBytes    int64
	ShutdownTimeout time.Duration
	LogLevel        slog.Level
	LogFormat       string
	TestClock       bool
	Pprof           bool
}

// errUsage marks a configuration refused before anything started.
var errUsage = errors.New("usage")

// parseConfig reads args over the environment over the defaults: every
// flag can also be given as its PICOMQ_ variable (--data-dir as
// PICOMQ_DATA_DIR), and a flag on the command line wins over its variable.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (config, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "broker-0"
	}
	c := config{
		Listen:          ":4437",
		NodeID:          host,
		MaxBatchBytes:   8 << 20,
		InlineBytes:     core.DefaultInlineBytes,
		PageCacheBytes:  core.DefaultPageCacheBytes,
		SyncLinger:      core.DefaultSyncLinger,
		LongPollTimeout: time.Second,
		MaxBodyBytes:    16 << 20,
		ShutdownTimeout: 20 * time.Second,
		LogLevel:        slog.LevelInfo,
		LogFormat:       "json",
	}
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: broker --data-dir DIR [flags]\n\n"+
			"Runs one PicoMQ broker: the partitioned-log and admin HTTP API, /healthz,\n"+
			"/readyz and /metrics on one port. Every flag may also be set by its\n"+
			"environment variable (shown in brackets); the command line wins.\n\n")
		fs.VisitAll(func(f *flag.Flag) {
			fmt.Fprintf(out, "  --%s [%s]\n    \t%s", f.Name, envName(f.Name), f.Usage)
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
				fmt.Fprintf(out, " (default %s)", f.DefValue)
			}
			fmt.Fprintln(out)
		})
	}
	fs.StringVar(&c.DataDir, "data-dir", "", "directory holding the metadata log and the objects (required; created 0700 if absent)")
	fs.StringVar(&c.Listen, "listen", c.Listen, "address the HTTP API listens on")
	fs.StringVar(&c.NodeID, "node-id", c.NodeID, "this broker's id in the metadata log and as stream owner, the host name unless set")
	fs.DurationVar(&c.FlushLinger, "flush-linger", 0, "how long the group-commit flusher waits for more appends before writing (0: as soon as the previous flush is done)")
	fs.DurationVar(&c.SyncLinger, "sync-linger", c.SyncLinger, "how long a group-commit object that gets its own fdatasync (above --inline-bytes) waits for the appends other writers are sending, so that one fdatasync covers more of them (0: never)")
	fs.Var((*byteSize)(&c.MaxBatchBytes), "max-batch-bytes", "bound of one group-commit object, in bytes (suffixes KiB, MiB, GiB)")
	fs.Var((*byteSize)(&c.InlineBytes), "inline-bytes", "largest group-commit object whose bytes travel in its metadata-log entry, so that one fsync acknowledges it instead of two (0: never; at most 1MiB)")
	fs.Var((*byteSize)(&c.PageCacheBytes), "page-cache-bytes", "how many bytes of the objects it wrote last the broker leaves in the kernel's page cache; older objects' pages are dropped once on disk, so that new writes reuse them and the page cache does not fill the pod's memory (0: leave them all to the kernel)")
	fs.DurationVar(&c.LongPollTimeout, "long-poll-timeout", c.LongPollTimeout, "longest a read with wait= waits for an append")
	fs.Var((*byteSize)(&c.MaxBodyBytes), "max-body-bytes", "largest request body accepted, in bytes (suffixes KiB, MiB, GiB)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long a SIGTERM waits for requests in flight before closing their connections")
	fs.TextVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error (debug also shows the metadata log's own logs)")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "json or text")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve Go's profiler under /debug/pprof/ on the API port (for diagnosing CPU and memory use; off by default since it exposes internals)")
	fs.BoolVar(&c.TestClock, "test-clock", false, "TESTS ONLY: run on a clock that stands still until set with PUT /v1/admin/clock?now=T")

	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(envName(f.Name)); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%w: %s=%q: %v", errUsage, envName(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		return c, envErr
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, fmt.Errorf("%w: %v", errUsage, err)
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	case c.DataDir == "":
		return c, fmt.Errorf("%w: --data-dir (or PICOMQ_DATA_DIR) is required", errUsage)
	case c.LogFormat != "json" && c.LogFormat != "text":
		return c, fmt.Errorf("%w: --log-format %q: want json or text", errUsage, c.LogFormat)
	case c.FlushLinger < 0 || c.SyncLinger < 0 || c.LongPollTimeout <= 0 || c.ShutdownTimeout < 0:
		return c, fmt.Errorf("%w: durations must not be negative, and --long-poll-timeout must be positive", errUsage)
	case c.MaxBatchBytes <= 0 || c.MaxBodyBytes <= 0:
		return c, fmt.Errorf("%w: byte sizes must be positive", errUsage)
	case c.InlineBytes < 0 || c.InlineBytes > core.MaxInlineBytes:
		return c, fmt.Errorf("%w: --inline-bytes %d: want 0 to %d", errUsage, c.InlineBytes, core.MaxInlineBytes)
	}
	return c, nil
}

// envName is a flag's variable: --data-dir is PICOMQ_DATA_DIR.
func envName(flag string) string {
	return "PICOMQ_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// byteSize is a flag of bytes: 1048576, 1024KiB, 1MiB, 1GiB.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return errors.New("not a byte size such as 8388608 or 8MiB")
	}
	*b = byteSize(n * mult)
	return nil
}

// zeroMeansNever turns a flag's 0, "never", into the broker Config's
// negative (whose 0 is "the default"): --inline-bytes, --sync-linger,
// --page-cache-bytes.
func zeroMeansNever[T ~int64](v T) T {
	if v == 0 {
		return -1
	}
	return v
}
