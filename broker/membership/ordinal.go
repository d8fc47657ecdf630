package membership

import (
	"errors"
	"strconv"
	"strings"
)

// Ordinal is a node name's ordinal: the number after its last '-'
// (StatefulSet pod names, broker-0). Membership orders voters by it, and
// a node's name must carry one to be a member.
func Ordinal(node string) (int, error) {
	i := strings.LastIndexByte(node, '-')
	if i < 0 || i == len(node)-1 {
		return 0, errors.New("a cluster node's name ends in -<ordinal>, as a StatefulSet's pods do")
	}
	n, err := strconv.Atoi(node[i+1:])
	if err != nil || n < 0 {
		return 0, errors.New("a cluster node's name ends in -<ordinal>, as a StatefulSet's pods do")
	}
	return n, nil
}
