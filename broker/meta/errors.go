package meta

import "github.com/picomq/picomq/broker/node"

// The refusals the state machine returns from Apply are declared with the
// broker's vocabulary in package node, which the front ends read; these
// names let the state machine's code say them briefly.
var (
	StreamNotFound   = node.StreamNotFound
	StaleEpoch       = node.StaleEpoch
	OffsetMismatch   = node.OffsetMismatch
	StreamClosed     = node.StreamClosed
	ProducerFenced   = node.ProducerFenced
	ProducerSeqGap   = node.ProducerSeqGap
	StreamSeqOrder   = node.StreamSeqOrder
	RangesChanged    = node.RangesChanged
	BadCommand       = node.BadCommand
	StreamExists     = node.StreamExists
	PartitionsShrink = node.PartitionsShrink
	StreamGone       = node.StreamGone
	ProducerEpochSeq = node.ProducerEpochSeq
	MemberRemoved    = node.MemberRemoved
	ReplicasChanged  = node.ReplicasChanged
	ObjectGone       = node.ObjectGone
)
