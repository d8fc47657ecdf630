package core

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/picomq/picomq/broker/node"
)

// TestMovesWaitForEveryMembersLevel: while a current member recorded a
// build from before the replicas command (level 0: a rolling upgrade
// half done), a move of replica sets is refused before anything is
// proposed — that member would refuse it and its state part from the
// others'. A removed member does not count; once the old member records
// the new level, the move goes through.
func TestMovesWaitForEveryMembersLevel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir())
	defer b.Close()
	for _, m := range []Member{{ID: "m-a", Node: "m-0", Level: Level}, {ID: "m-old", Node: "m-1"}, {ID: "m-gone", Node: "m-2"}} {
		if _, err := b.RecordMember(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.RemoveMember(ctx, "m-gone"); err != nil {
		t.Fatal(err)
	}
	err := b.MoveReplicas(ctx, 42, []string{"m-a"}, []string{"m-a", "m-old"})
	if !errors.Is(err, node.LevelTooLow) || !strings.Contains(err.Error(), "m-old") {
		t.Fatalf("a move with m-old at the base level: %v, want LEVEL_TOO_LOW naming m-old", err)
	}
	if _, err := b.RecordMember(ctx, Member{ID: "m-old", Node: "m-1", Level: Level}); err != nil {
		t.Fatal(err)
	}
	if err := b.CanMoveReplicas(); err != nil {
		t.Fatalf("every current member at this build's level: %v", err)
	}
	// Proposed now: refused by the state machine only because object 42
	// does not exist.
	if err := b.MoveReplicas(ctx, 42, []string{"m-a"}, []string{"m-a", "m-old"}); !errors.Is(err, node.ReplicasChanged) {
		t.Fatalf("a move once every member can apply it: %v, want REPLICAS_CHANGED (no such object)", err)
	}
	if m, _ := b.Member("m-old"); m.Level != Level {
		t.Errorf("m-old's level %d after it recorded %d", m.Level, Level)
	}
}
