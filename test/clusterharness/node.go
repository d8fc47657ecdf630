package clusterharness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// NodeInfo is GET /v1/admin/node, decoded tolerantly: the fields of
// broker/httpapi/wire.NodeInfo today plus those cluster mode adds
// (clusterId, memberId, voters, slotsHeld), whatever shape they take, so
// that the harness neither breaks nor lags when the answer grows.
type NodeInfo struct {
	NodeID       string `json:"nodeId"`
	RaftState    string `json:"raftState"`
	Leader       string `json:"leader"`
	AppliedIndex uint64 `json:"appliedIndex"`
	LastIndex    uint64 `json:"lastIndex"`
	Streams      int    `json:"streams"`
	Ready        bool   `json:"ready"`
	ClusterID    string `json:"clusterId"`
	MemberID     string `json:"memberId"`
	// Failsafe is set while the broker serves through an API server
	// outage on failsafe rounds.
	Failsafe *struct {
		Rounds int `json:"rounds"`
	} `json:"failsafe"`

	// VotersRaw and SlotsRaw keep the fields as sent; Voters and Slots
	// read them.
	VotersRaw json.RawMessage `json:"voters"`
	SlotsRaw  json.RawMessage `json:"slotsHeld"`

	// Raw is the whole answer, for messages.
	Raw json.RawMessage `json:"-"`
}

// Voters returns the voters' names: from a list of strings, or of objects
// naming each voter by id, nodeId, name or memberId. Nil when absent.
func (n NodeInfo) Voters() []string {
	if len(n.VotersRaw) == 0 || bytes.Equal(n.VotersRaw, []byte("null")) {
		return nil
	}
	var names []string
	if json.Unmarshal(n.VotersRaw, &names) == nil {
		return names
	}
	names = nil // a failed decode may have left elements
	var objs []map[string]any
	if json.Unmarshal(n.VotersRaw, &objs) == nil {
		for _, o := range objs {
			for _, k := range []string{"nodeId", "name", "id", "memberId"} {
				if s, ok := o[k].(string); ok && s != "" {
					names = append(names, s)
					break
				}
			}
		}
	}
	return names
}

// Slots returns how many slots the broker holds and, when it lists them,
// which; ok is false when the broker does not report slots at all.
func (n NodeInfo) Slots() (count int, list []int, ok bool) {
	if len(n.SlotsRaw) == 0 || bytes.Equal(n.SlotsRaw, []byte("null")) {
		return 0, nil, false
	}
	if json.Unmarshal(n.SlotsRaw, &count) == nil {
		return count, nil, true
	}
	if json.Unmarshal(n.SlotsRaw, &list) == nil {
		return len(list), list, true
	}
	return 0, nil, false
}

// IsLeader reports whether the broker says it is the metadata leader.
func (n NodeInfo) IsLeader() bool {
	return n.RaftState == "Leader" || (n.Leader != "" && n.Leader == n.NodeID)
}

// GetNode asks the broker at url for its node status.
func GetNode(ctx context.Context, url string) (NodeInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/admin/node", nil)
	if err != nil {
		return NodeInfo{}, err
	}
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		return NodeInfo{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return NodeInfo{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return NodeInfo{}, fmt.Errorf("GET %s/v1/admin/node: %s: %.200s", url, resp.Status, body)
	}
	var n NodeInfo
	if err := json.Unmarshal(body, &n); err != nil {
		return NodeInfo{}, fmt.Errorf("GET %s/v1/admin/node: %v: %.200s", url, err, body)
	}
	n.Raw = body
	return n, nil
}

// Ready reports whether the broker at url answers /readyz with 200.
func Ready(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s/readyz: %s: %.200s", url, resp.Status, body)
	}
	return nil
}

// noKeepAlive is the harness's own HTTP client: probes open a connection
// each, so that a SIGSTOPped broker's kept-alive socket never stalls the
// probe of its restarted successor on the same port.
// With Security it also trusts the clusters' CAs and presents their
// harness token.
var noKeepAlive = &http.Client{Transport: newHarnessTransport()}
