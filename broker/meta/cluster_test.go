package meta

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// TestClusterIDIsSetOnce: the first Cluster names the cluster; a later one
// changes nothing and answers the id that holds.
func TestClusterIDIsSetOnce(t *testing.T) {
	t.Parallel()
	s := NewState()
	if r := mustApply(t, s, &Command{Op: OpCluster, Cluster: &Cluster{ID: "c-1"}}).(*ClusterResult); r.ID != "c-1" {
		t.Fatalf("first cluster id %q", r.ID)
	}
	if r := mustApply(t, s, &Command{Op: OpCluster, Cluster: &Cluster{ID: "c-2"}}).(*ClusterResult); r.ID != "c-1" || s.ClusterID != "c-1" {
		t.Fatalf("a second Cluster answered %q and left %q, want c-1 kept", r.ID, s.ClusterID)
	}
}

// TestMembersAreRecordedAndRemovedForGood: a member joins, changes its
// address, is removed; a change for the removed id is refused, and the same
// node under a new incarnation is a new member.
func TestMembersAreRecordedAndRemovedForGood(t *testing.T) {
	t.Parallel()
	s := NewState()
	m := Member{ID: "demo-1~a", Node: "demo-1", Incarnation: "a", PeerAddr: "demo-1.h:7001"}
	mustApply(t, s, &Command{Op: OpMember, Member: &MemberChange{Member: m, Now: 10}})
	m.PeerAddr = "demo-1.h:7002"
	mustApply(t, s, &Command{Op: OpMember, Member: &MemberChange{Member: m, Now: 20}})
	if got := s.Members["demo-1~a"]; got.PeerAddr != "demo-1.h:7002" || got.Joined != 10 || got.Removed != 0 || got.Number != 1 {
		t.Fatalf("member after an address change: %+v", got)
	}
	m.Removed = 1
	mustApply(t, s, &Command{Op: OpMember, Member: &MemberChange{Member: m, Now: 30}})
	if got := s.Members["demo-1~a"]; got.Removed != 30 {
		t.Fatalf("removed member: %+v, want removed at 30", got)
	}
	m.Removed = 0
	if err, _ := s.Apply(&Command{Op: OpMember, Member: &MemberChange{Member: m, Now: 40}}).(error); !errors.Is(err, MemberRemoved) {
		t.Fatalf("a removed member coming back: %v, want MEMBER_REMOVED", err)
	}
	fresh := Member{ID: "demo-1~b", Node: "demo-1", Incarnation: "b", PeerAddr: "demo-1.h:7001"}
	if got := mustApply(t, s, &Command{Op: OpMember, Member: &MemberChange{Member: fresh, Now: 50}}).(*Member); got.Number != 2 {
		t.Fatalf("the second member recorded got number %d, want 2 (numbers are never reused)", got.Number)
	}
	if len(s.Members) != 2 || s.Members["demo-1~a"].Removed == 0 {
		t.Fatalf("members %v", s.Members)
	}
	if err, _ := s.Apply(&Command{Op: OpMember, Member: &MemberChange{Member: Member{ID: "x"}}}).(error); !errors.Is(err, BadCommand) {
		t.Fatalf("a member without a node: %v, want BAD_COMMAND", err)
	}
}

// TestReplicasAreRecordedAndSurviveASnapshot: the members a commit names
// as holding its object are the object's replicas, in a clone and through
// the snapshot's JSON.
func TestReplicasAreRecordedAndSurviveASnapshot(t *testing.T) {
	t.Parallel()
	s := NewState()
	id := mustApply(t, s, create("r", 1)).(*CreateResult).Entry.Streams[0]
	mustApply(t, s, &Command{Op: OpOpen, Open: &Open{Stream: id, Owner: "n"}})
	c := commit(7, Append{Stream: id, Epoch: 0, First: 0, Range: rng(0, 1, 7)})
	c.Commit.Replicas = []string{"a~1", "b~1", "c~1"}
	mustApply(t, s, c)
	want := []string{"a~1", "b~1", "c~1"}
	if got := s.Objects[7].Replicas; !reflect.DeepEqual(got, want) {
		t.Fatalf("replicas %v, want %v", got, want)
	}
	c.Commit.Replicas[0] = "changed after the apply"
	clone := s.Clone()
	if got := clone.Objects[7].Replicas; !reflect.DeepEqual(got, want) {
		t.Fatalf("the state kept the command's slice: %v", got)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Objects[7].Replicas; !reflect.DeepEqual(got, want) {
		t.Fatalf("replicas after a snapshot round trip %v", got)
	}
}

// TestCodecWritesTheOldestVersionThatFits: commits and replaces without
// replicas keep the tags the previous version reads.
func TestCodecWritesTheOldestVersionThatFits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cmd *Command
		tag byte
	}{
		{&Command{Op: OpCommit, Commit: &Commit{Object: 1}}, tagCommitV1},
		{&Command{Op: OpCommit, Commit: &Commit{Object: 1, Frames: []byte("f")}}, tagCommitV2},
		{&Command{Op: OpCommit, Commit: &Commit{Object: 1, Replicas: []string{"a"}}}, tagCommitV3},
		{&Command{Op: OpReplace, Replace: &Replace{Stream: 1}}, tagReplaceV1},
		{&Command{Op: OpReplace, Replace: &Replace{Stream: 1, Replicas: []string{"a"}}}, tagReplaceV2},
	} {
		raw, err := Encode(c.cmd)
		if err != nil {
			t.Fatal(err)
		}
		if raw[0] != c.tag {
			t.Errorf("%s %+v: tag %#x, want %#x", c.cmd.Op, c.cmd, raw[0], c.tag)
		}
	}
}

// TestReplicasMoveOnlyFromTheSetTheyWerePlannedOn: a move of an object's
// copies applies when the object's set is the one it names, through the
// log's codec; a second mover planning on the same old set, a move of a
// collected object and an empty new set are refused and change nothing.
func TestReplicasMoveOnlyFromTheSetTheyWerePlannedOn(t *testing.T) {
	t.Parallel()
	s := NewState()
	id := mustApply(t, s, create("r", 1)).(*CreateResult).Entry.Streams[0]
	mustApply(t, s, &Command{Op: OpOpen, Open: &Open{Stream: id, Owner: "n"}})
	c := commit(7, Append{Stream: id, Epoch: 0, First: 0, Range: rng(0, 1, 7)})
	c.Commit.Replicas = []string{"a~1", "b~1", "c~1"}
	mustApply(t, s, c)

	move := &Command{Op: OpReplicas, Replicas: &Replicas{Object: 7, Old: []string{"a~1", "b~1", "c~1"}, New: []string{"a~1", "b~1", "d~1"}}}
	raw, err := Encode(move)
	if err != nil {
		t.Fatal(err)
	}
	var decoded Command
	if err := Decode(raw, &decoded); err != nil || !reflect.DeepEqual(decoded.Replicas, move.Replicas) {
		t.Fatalf("codec round trip: %+v, %v", decoded.Replicas, err)
	}
	mustApply(t, s, &decoded)
	if got := s.Objects[7].Replicas; !reflect.DeepEqual(got, []string{"a~1", "b~1", "d~1"}) {
		t.Fatalf("replicas after the move %v", got)
	}
	move.Replicas.New[2] = "changed after the apply"
	if got := s.Objects[7].Replicas[2]; got != "d~1" {
		t.Fatalf("the state kept the command's slice: %v", got)
	}

	rival := &Command{Op: OpReplicas, Replicas: &Replicas{Object: 7, Old: []string{"a~1", "b~1", "c~1"}, New: []string{"a~1", "b~1", "e~1"}}}
	if err, _ := s.Apply(rival).(error); !errors.Is(err, ReplicasChanged) {
		t.Fatalf("a move planned on the old set: %v, want REPLICAS_CHANGED", err)
	}
	gone := &Command{Op: OpReplicas, Replicas: &Replicas{Object: 99, Old: []string{"a~1"}, New: []string{"b~1"}}}
	if err, _ := s.Apply(gone).(error); !errors.Is(err, ReplicasChanged) {
		t.Fatalf("a move of an unknown object: %v, want REPLICAS_CHANGED", err)
	}
	empty := &Command{Op: OpReplicas, Replicas: &Replicas{Object: 7, Old: []string{"a~1", "b~1", "d~1"}}}
	if err, _ := s.Apply(empty).(error); !errors.Is(err, BadCommand) {
		t.Fatalf("a move to no replica: %v, want BAD_COMMAND", err)
	}
	if got := s.Objects[7].Replicas; !reflect.DeepEqual(got, []string{"a~1", "b~1", "d~1"}) {
		t.Fatalf("refused moves changed the set: %v", got)
	}
}
