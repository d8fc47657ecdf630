// Package diskspace watches the broker's data volume: it refuses appends
// while free space is below a headroom, so that what frees space (deletes,
// trims, merges, the metadata log's commits, recovery) always has room to
// run, and it latches the storage as failed once a write could not be made
// durable.
package diskspace

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/picomq/picomq/broker/bytesize"
)

// Headroom is --disk-headroom: "auto" (the zero value), a byte size, or 0
// (disabled).
type Headroom struct {
	Bytes int64 // with Fixed: the bytes kept free (0: none)
	Fixed bool  // false: auto
}

// Bounds of the auto headroom: 5% of the volume, at least 64 MiB (but at
// most a quarter of a small volume) and at most 5 GiB.
const (
	autoPercent = 5
	autoMin     = 64 << 20
	autoMax     = 5 << 30
)

// For returns the bytes to keep free on a volume of total bytes.
func (h Headroom) For(total int64) int64 {
	if h.Fixed {
		return h.Bytes
	}
	return min(max(total*autoPercent/100, min(autoMin, total/4)), autoMax)
}

func (h Headroom) String() string {
	if !h.Fixed {
		return "auto"
	}
	return strconv.FormatInt(h.Bytes, 10)
}

// ParseHeadroom reads "auto", "0", a number of bytes, or one with a suffix
// KiB, MiB or GiB.
func ParseHeadroom(s string) (Headroom, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "auto" {
		return Headroom{}, nil
	}
	n, err := bytesize.Parse(s)
	if err != nil {
		return Headroom{}, fmt.Errorf(`not "auto", 0 or a byte size: %w`, err)
	}
	return Headroom{Bytes: n, Fixed: true}, nil
}

// Set parses s into h: a Headroom is a flag.Value.
func (h *Headroom) Set(s string) error {
	v, err := ParseHeadroom(s)
	if err != nil {
		return err
	}
	*h = v
	return nil
}
