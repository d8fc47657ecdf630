package stream

// The 32-bit FNV-1a parameters. They are fixed forever: every engine and
// every client places keys with them, and a change would move every key.
const (
	fnvOffset32 = 2166136261
	fnvPrime32  = 16777619
)

// PartitionOf returns the partition a record keyed key is appended to among
// partitions: the 32-bit FNV-1a hash of the key modulo partitions. It is the
// one placement every engine applies, so a key lands on the same partition in
// memory, on a directory and in a table.
//
// A partitions below one is read as one. An empty key has no partition of its
// own: an engine spreads unkeyed batches round-robin and does not ask; asked
// anyway, PartitionOf answers the hash of no bytes.
func PartitionOf(key []byte, partitions int) int {
	if partitions < 1 {
		return 0
	}
	// Inlined rather than hash/fnv: no allocation on the append path.
	h := uint32(fnvOffset32)
	for _, b := range key {
		h ^= uint32(b)
		h *= fnvPrime32
	}
	return int(uint64(h) % uint64(partitions))
}
