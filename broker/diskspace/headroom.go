// Package diskspace watches the broker's data volume: it refuses appends
// while free space is below a headroom, so that what frees space (deletes,
// trims, merges, the metadata log's commits, recovery) always has room to
// run, and it latches the storage as failed once a write could not be made
// durable.
package diskspace

import (
	"errors"
	"strconv"
	"strings"
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
		return Headroom{}, errors.New(`not "auto", 0 or a byte size such as 67108864 or 64MiB`)
	}
	return Headroom{Bytes: n * mult, Fixed: true}, nil
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
