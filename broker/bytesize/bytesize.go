// Package bytesize reads the byte sizes the broker's flags take: a number
// of bytes, or one with a binary suffix (KiB, MiB, GiB).
package bytesize

import (
	"fmt"
	"strconv"
	"strings"
)

var suffixes = []struct {
	suffix string
	mult   int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}}

// Parse reads s, such as 8388608 or 8MiB, into bytes. Negative sizes and
// sizes above 2^62 (beyond any volume, and room left to add to them) are
// refused.
func Parse(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range suffixes {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a byte size such as 8388608 or 8MiB", s)
	}
	return n * mult, nil
}
