// Command picomq is PicoMQ's command line: stream verbs against a broker
// (or a cluster's client Service) over the broker's HTTP API.
//
//	export PICOMQ_URL=http://127.0.0.1:4437
//	picomq streams create app/events --partitions 4
//	printf 'one\ntwo\n' | picomq append app/events
//	picomq read app/events --from 0
//	picomq tail app/events
//
// Every refusal is the broker's coded error, printed with its fields; the
// exit status is the error's exit code (64 for a bad command line).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
