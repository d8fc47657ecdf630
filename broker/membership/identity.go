package membership

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Identity is who a data directory belongs to: a node (pod) and the
// incarnation its directory was formatted as, which together are the
// member's id. A broker whose directory is wiped gets a new incarnation,
// so it joins as a new member and can never pass for the old one with an
// empty log (Kafka's KIP-853 keys voters by directory id for this reason).
type Identity struct {
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
	// Number is the member's number once the cluster recorded it (its
	// object ids start at Number<<48); 0 before.
	Number int `json:"number,omitempty"`
	// Cluster is the id of the cluster the member belongs to, once known.
	Cluster string `json:"cluster,omitempty"`
	// Legacy marks a lone broker's directory adopted into a cluster: its
	// log names it by its node alone.
	Legacy bool `json:"legacy,omitempty"`
	// Bootstrapping is set from the decision to bootstrap until the
	// cluster is named: a bootstrap that died before writing its log is
	// made again.
	Bootstrapping bool `json:"bootstrapping,omitempty"`
}

// ID is the member id: the node and the incarnation ("demo-1~3f9a2c1e"),
// or the node alone for an adopted lone broker's directory.
func (id Identity) ID() string {
	if id.Legacy {
		return id.Node
	}
	return id.Node + "~" + id.Incarnation
}

// identityFile is the identity's file in the data directory.
const identityFile = "identity.json"

// loadIdentity reads dataDir's identity. A directory without one is either
// brand new (fresh: a new incarnation is made, not yet saved) or a lone
// broker's holding a log (adopted as legacy).
func loadIdentity(dataDir, node string) (id Identity, fresh bool, err error) {
	raw, err := os.ReadFile(filepath.Join(dataDir, identityFile))
	switch {
	case err == nil:
		if err := json.Unmarshal(raw, &id); err != nil {
			return id, false, fmt.Errorf("membership: %s is corrupt: %w", identityFile, err)
		}
		if id.Node != node {
			return id, false, fmt.Errorf("membership: the data directory belongs to node %q, not %q: a volume was handed to another pod", id.Node, node)
		}
		return id, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return id, false, fmt.Errorf("membership: read %s: %w", identityFile, err)
	}
	if hasLog(dataDir) {
		return Identity{Node: node, Legacy: true}, false, nil
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return id, false, err
	}
	return Identity{Node: node, Incarnation: hex.EncodeToString(b[:])}, true, nil
}

// hasLog reports whether dataDir holds a metadata log.
func hasLog(dataDir string) bool {
	for _, p := range []string{"meta/wal", "meta/snapshots", "meta/raft.db"} {
		if entries, err := os.ReadDir(filepath.Join(dataDir, p)); err == nil && len(entries) > 0 {
			return true
		}
		if fi, err := os.Stat(filepath.Join(dataDir, p)); err == nil && !fi.IsDir() {
			return true
		}
	}
	return false
}

// save writes the identity durably: it decides who the directory's log
// belongs to.
func (id Identity) save(dataDir string) error {
	raw, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	return writeDurably(dataDir, identityFile, append(raw, '\n'))
}

// writeDurably writes dataDir/name so that a crash leaves the old file or
// the new one, never part of it: aside, fsynced, renamed, the directory
// fsynced.
func writeDurably(dataDir, name string, raw []byte) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(dataDir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(raw); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dataDir, name)); err != nil {
		return err
	}
	return syncDir(dataDir)
}

// syncDir makes a rename or removal in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
