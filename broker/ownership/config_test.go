package ownership

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/picomq/picomq/broker/errs"
)

func validConfig() Config {
	return Config{
		Client: fake.NewClientset(), Namespace: "picomq", Cluster: "demo", Node: "demo-0", Identity: "demo-0/abc",
		Slots: 64, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Release: func(context.Context, int) error { return nil },
		Revoke:  func(int) {},
	}
}

// New refuses, never clamps, a field out of range, and names it with its
// value.
func TestNewValidatesEveryField(t *testing.T) {
	if _, err := New(validConfig()); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	cases := []struct {
		field string
		edit  func(*Config)
	}{
		{"Client", func(c *Config) { c.Client = nil }},
		{"Namespace", func(c *Config) { c.Namespace = "" }},
		{"Namespace", func(c *Config) { c.Namespace = "Bad_NS" }},
		{"Cluster", func(c *Config) { c.Cluster = "" }},
		{"Cluster", func(c *Config) { c.Cluster = "no/slash" }},
		{"Cluster", func(c *Config) { c.Cluster = "UPPER" }},
		{"Slots", func(c *Config) { c.Slots = 0 }},
		{"Slots", func(c *Config) { c.Slots = MaxSlots + 1 }},
		{"Node", func(c *Config) { c.Node = "" }},
		{"Node", func(c *Config) { c.Node = "demo_0" }},
		{"Identity", func(c *Config) { c.Identity = "" }},
		{"LeaseDuration", func(c *Config) { c.LeaseDuration = 0 }},
		{"LeaseDuration", func(c *Config) { c.LeaseDuration = 1500 * time.Millisecond }},
		{"RenewDeadline", func(c *Config) { c.RenewDeadline = 0 }},
		{"RenewDeadline", func(c *Config) { c.RenewDeadline = c.LeaseDuration }},
		{"RenewDeadline", func(c *Config) { c.RenewDeadline = 20 * time.Second }},
		{"RetryPeriod", func(c *Config) { c.RetryPeriod = 0 }},
		{"RetryPeriod", func(c *Config) { c.RetryPeriod = c.RenewDeadline }},
		{"Release", func(c *Config) { c.Release = nil }},
		{"Revoke", func(c *Config) { c.Revoke = nil }},
	}
	for _, tc := range cases {
		cfg := validConfig()
		tc.edit(&cfg)
		_, err := New(cfg)
		if !errors.Is(err, BadConfig) {
			t.Errorf("%s: err = %v, want BAD_CONFIG", tc.field, err)
			continue
		}
		if f, _ := errs.FieldOf(err, "field"); f != tc.field {
			t.Errorf("%s: names field %v: %v", tc.field, f, err)
		}
		if errs.ExitCode(err) != 78 {
			t.Errorf("%s: exit code %d", tc.field, errs.ExitCode(err))
		}
	}
	// The relational rules carry both values.
	cfg := validConfig()
	cfg.RenewDeadline = 20 * time.Second
	_, err := New(cfg)
	if !strings.Contains(err.Error(), "value=20s") || !strings.Contains(err.Error(), "leaseDuration=15s") {
		t.Errorf("RenewDeadline error lacks the values: %v", err)
	}
}

// A registry that already has the metrics is refused with a coded error,
// not a panic.
func TestNewRefusesARegistryTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := validConfig()
	cfg.Metrics = reg
	if _, err := New(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg); !errors.Is(err, BadConfig) {
		t.Fatalf("second registration: %v", err)
	}
}
