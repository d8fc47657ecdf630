package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// table writes rows under a header, columns aligned as kubectl does.
func (a *app) table(header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(a.out, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// json writes v as indented JSON, for -o json.
func (a *app) json(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// jsonLine writes v as one line of JSON (a stream of records).
func (a *app) jsonLine(v any) error { return json.NewEncoder(a.out).Encode(v) }

// when prints a time for a table: RFC 3339 in UTC, or "-" for none.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// orDash is s, or "-" when empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printable shows bytes in a table cell: as text when they are valid
// UTF-8 without control characters, else as a quoted Go string; long
// values are cut.
func printable(b []byte) string {
	const most = 60
	s := string(b)
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		s = fmt.Sprintf("%q", b)
	}
	if utf8.RuneCountInString(s) > most {
		s = string([]rune(s)[:most-1]) + "…"
	}
	return orDash(s)
}
