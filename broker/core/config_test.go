package core

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConfigRefusedByField: a value Open cannot honour is refused, naming
// the field, before the data directory is touched — never clamped.
func TestConfigRefusedByField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		field string
		mod   func(*Config)
	}{
		{"InlineBytes", func(c *Config) { c.InlineBytes = MaxInlineBytes + 1 }},
		{"MaxBatchBytes", func(c *Config) { c.MaxBatchBytes = -1 }},
		{"CommitsInFlight", func(c *Config) { c.CommitsInFlight = -1 }},
		{"MaintenanceInterval", func(c *Config) { c.MaintenanceInterval = -time.Second }},
		{"FlushLinger", func(c *Config) { c.FlushLinger = -time.Millisecond }},
		{"MergeMinRanges", func(c *Config) { c.MergeMinRanges = -2 }},
		{"FrameBytes", func(c *Config) { c.FrameBytes = -1 }},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		cfg := Config{DataDir: dir}
		c.mod(&cfg)
		b, err := Open(cfg)
		if err == nil {
			b.Close()
			t.Fatalf("%s: an out-of-range value was accepted", c.field)
		}
		if !strings.Contains(err.Error(), "Config."+c.field) {
			t.Errorf("%s: the refusal %q does not name the field", c.field, err)
		}
		if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
			t.Errorf("%s: the data directory was created before the refusal", c.field)
		}
	}
}

// TestConfigNegativeTurnsOff: the fields whose negative value means "off"
// accept it, and zero takes the default.
func TestConfigNegativeTurnsOff(t *testing.T) {
	t.Parallel()
	c := Config{DataDir: "x", InlineBytes: -1, SyncLinger: -1, PageCacheBytes: -1}
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
	d := c.withDefaults()
	if d.InlineBytes != -1 || d.SyncLinger != -1 || d.PageCacheBytes != -1 {
		t.Fatalf("off values changed by the defaults: %+v", d)
	}
	z := Config{}.withDefaults()
	if z.InlineBytes != DefaultInlineBytes || z.SyncLinger != DefaultSyncLinger || z.PageCacheBytes != DefaultPageCacheBytes || z.MaxBatchBytes != 8<<20 {
		t.Fatalf("zero values not defaulted: %+v", z)
	}
}
