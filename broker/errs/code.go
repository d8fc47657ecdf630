package errs

import (
	"fmt"
	"strconv"
	"strings"
)

// Code identifies one kind of refusal for good. Its four bytes read as a
// dotted quad, most significant first: 0x00_02_26_01 is 0.2.38.1. The first
// bytes name the block a package was given (ADR 0160), the last one the
// refusal inside it, so a code never moves when its name or message is
// reworded.
type Code uint32

// String returns the dotted form, 0.2.38.1, the one logs and problems carry.
func (c Code) String() string {
	return fmt.Sprintf("%d.%d.%d.%d", byte(c>>24), byte(c>>16), byte(c>>8), byte(c))
}

// Hex returns the form the source declares codes in, 0x00_02_26_01.
func (c Code) Hex() string {
	return fmt.Sprintf("0x%02X_%02X_%02X_%02X", byte(c>>24), byte(c>>16), byte(c>>8), byte(c))
}

// MarshalText writes the dotted form, so a Code is a string in JSON.
func (c Code) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads any form ParseCode reads.
func (c *Code) UnmarshalText(text []byte) error {
	v, err := ParseCode(string(text))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// ParseCode reads a code in its dotted form (0.2.38.1), its hexadecimal form
// with or without underscores (0x00_02_26_01), or as a decimal number.
func ParseCode(s string) (Code, error) {
	if parts := strings.Split(s, "."); len(parts) == 4 {
		var c Code
		for _, p := range parts {
			b, err := strconv.ParseUint(p, 10, 8)
			if err != nil {
				return 0, fmt.Errorf("errs: code %q: byte %q is not 0..255", s, p)
			}
			c = c<<8 | Code(b)
		}
		return c, nil
	}
	// Base 0 reads 0x prefixes and underscores after one, as Go source does.
	v, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return 0, fmt.Errorf("errs: code %q is neither dotted, hexadecimal nor decimal", s)
	}
	return Code(v), nil
}
