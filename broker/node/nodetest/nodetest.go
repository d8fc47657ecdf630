// Package nodetest holds checks the front ends' tests share about a
// node.Broker.
package nodetest

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/picomq/picomq/broker/node"
)

// State is what a refused request must leave unchanged, as text to
// compare: every stream's name, each partition's bounds, the closed flag
// and the producers' state.
func State(t testing.TB, b node.Broker) string {
	t.Helper()
	var lines []string
	for _, e := range b.List() {
		line := fmt.Sprintf("%s closed=%v producers=%v", e.Name, e.Closed, e.Producers)
		for p := range e.Partitions {
			tail, err := b.TailOf(e.Name, p)
			if err != nil {
				t.Fatal(err)
			}
			line += fmt.Sprintf(" p%d=[%d,%d)", p, tail.Start, tail.End)
		}
		lines = append(lines, line)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
