package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/picomq/picomq/broker/httpapi/wire"
)

func (a *app) signCommand() *cobra.Command {
	var expires time.Duration
	cmd := &cobra.Command{
		Use:   "sign NAME|PREFIX/",
		Short: "print a signed read URL: reading (and live-tailing) one stream, or the streams under a prefix, with no token until it expires",
		Long: `Asks the broker to sign a read URL (POST /v1/sign). A name ending in '/' signs the
streams under that prefix (the query printed signs any read URL of one of them);
otherwise the one stream's URL is printed. Needs a write or admin token covering
what is signed, and brokers run with --url-signing-keys-dir.`,
		Args: exactArgs(1, "a stream name, or a prefix ending in '/'"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			req := wire.SignRequest{Stream: args[0], ExpiresIn: expires.String()}
			if strings.HasSuffix(args[0], "/") {
				req = wire.SignRequest{Prefix: args[0], ExpiresIn: expires.String()}
			}
			out, err := c.Sign(ctx, req)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.json(out)
			}
			if out.URL != "" {
				fmt.Fprintln(a.out, out.URL)
			} else {
				fmt.Fprintln(a.out, out.Query)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&expires, "expires", time.Hour, "how long the URL is valid (at most 168h)")
	return cmd
}
