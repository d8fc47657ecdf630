package stack

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Build builds what the stack runs: the control plane's binaries (once
// per machine, hack/controlplane-assets.sh caches them) and, from the
// checkout, the broker, the operator and this CLI into the state folder's
// bin (go's build cache makes that quick when nothing changed). It
// returns the control plane's folder.
func Build(ctx context.Context, o Options, progress io.Writer) (string, error) {
	if err := o.defaults(); err != nil {
		return "", err
	}
	p := paths{o.StateDir}
	start := time.Now()
	fmt.Fprintln(progress, "picomq dev: control plane binaries (built once per machine; the first build takes about 15 minutes)...")
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(o.Checkout, "hack", "controlplane-assets.sh"))
	cmd.Dir = o.Checkout
	cmd.Stdout, cmd.Stderr = &out, progress
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/controlplane-assets.sh: %w", err)
	}
	cpBin := strings.TrimSpace(out.String())
	if i := strings.LastIndexByte(cpBin, '\n'); i >= 0 {
		cpBin = cpBin[i+1:]
	}
	fmt.Fprintf(progress, "picomq dev: broker, operator and CLI from %s...\n", o.Checkout)
	if err := os.MkdirAll(p.bin(), 0o755); err != nil {
		return "", err
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", p.bin()+"/", "./cmd/broker", "./cmd/manager", "./cmd/picomq")
	build.Dir = o.Checkout
	build.Stdout, build.Stderr = progress, progress
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("go build: %w", err)
	}
	fmt.Fprintf(progress, "picomq dev: built in %s\n", time.Since(start).Round(time.Second))
	return cpBin, nil
}
