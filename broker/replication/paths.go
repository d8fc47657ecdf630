package replication

import (
	"fmt"
	"strconv"
)

// ObjectsPath is the prefix of replication's peer API routes:
//
//	PUT ObjectsPath{id}                    a copy of object id (header and frames)
//	GET ObjectsPath{id}/frame?pos=P&len=N  the frame of N bytes at P, header included
//
// where id is the object id in 16 lower-case hex digits, as its file is
// named. Handler serves both.
const ObjectsPath = "/peer/v1/objects/"

func objectPath(id uint64) string { return fmt.Sprintf("%s%016x", ObjectsPath, id) }

func framePath(id uint64, pos, n int64) string {
	return fmt.Sprintf("%s%016x/frame?pos=%d&len=%d", ObjectsPath, id, pos, n)
}

// parseID reads an object id written as objectPath writes it, and only so,
// so that no two paths name one object.
func parseID(s string) (uint64, bool) {
	if len(s) != 16 {
		return 0, false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return 0, false
		}
	}
	id, err := strconv.ParseUint(s, 16, 64)
	return id, err == nil && id != 0
}
