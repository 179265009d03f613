package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// IdentityFile is the node identity file in the data dir. It is written
// once the data dir holds Raft state of a cluster (after a bootstrap, a
// restore, or a join that received the cluster's log) and never rewritten.
// Its presence says: this data dir belongs to a member that has voted and
// kept a term; if its Raft state is then missing or empty, the node must
// not start as a new one (it would forget its term and vote, and with a
// bootstrap list could found a second cluster under the same ids).
const IdentityFile = "node-identity.json"

// Identity is what a data dir records about the node that owns it.
type Identity struct {
	// ClusterID names the cluster: derived from the founding member list
	// at bootstrap, copied from the leader at join. Empty for a data dir
	// that existed before identity files (written at its first start
	// since).
	ClusterID string `json:"cluster_id"`
	// NodeID is the node's Raft id; a start with another id is refused.
	NodeID string `json:"node_id"`
	// Created is the wall-clock time the file was written, for people;
	// nothing reads it.
	Created time.Time `json:"created"`
}

// readIdentity returns the identity in dir, nil when there is none. A file
// that exists but cannot be read or decoded is an error.
func readIdentity(dir string) (*Identity, error) {
	path := filepath.Join(dir, IdentityFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: node identity: %w", err)
	}
	var id Identity
	if err := json.Unmarshal(b, &id); err != nil || id.NodeID == "" {
		if err == nil {
			err = errors.New("no node_id")
		}
		return nil, fmt.Errorf("cluster: node identity %s is damaged (%v): restore it from a copy, or replace this node (docs/OPERATIONS.md, Replacing a dead node)", path, err)
	}
	return &id, nil
}

// writeIdentity writes id into dir atomically: a temporary file, fsynced,
// renamed over the name, and the directory fsynced.
func writeIdentity(dir string, id Identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	if err := writeDurably(dir, IdentityFile, append(b, '\n')); err != nil {
		return fmt.Errorf("cluster: node identity: %w", err)
	}
	return nil
}

// writeDurably writes b to dir/name atomically: a temporary file, fsynced,
// renamed over name, and the directory fsynced.
func writeDurably(dir, name string, b []byte) error {
	tmp, err := os.CreateTemp(dir, name+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

// removeDurably removes dir/name, if there, and syncs dir, so that the
// removal survives a crash.
func removeDurably(dir, name string) error {
	if err := os.Remove(filepath.Join(dir, name)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return syncDir(dir)
}

// syncDir fsyncs directory dir: its entries' creations, renames and
// removals reach the disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// clusterIDOf derives a cluster id from the founding member list and, for
// a cluster restored from a backup, the restore's seed (seedFromBackup: the
// backup's digest and the token bump): every founding node computes the
// same one without talking to the others, and nodes founded differently
// get different ids, which the transport refuses to mix
// (transport.Config.ClusterID).
func clusterIDOf(bootstrap map[string]string, restoreSeed string) string {
	if len(bootstrap) == 0 {
		return ""
	}
	what := FormatPeers(bootstrap)
	if restoreSeed != "" {
		what += "\n" + restoreSeed
	}
	sum := sha256.Sum256([]byte(what))
	return hex.EncodeToString(sum[:8])
}

// foundingClusterIDKey is the stable-store key (raft.db) under which a
// first start that bootstraps or restores records the cluster id before it
// writes any Raft state, so that a start stopped before the identity file
// is written still writes the right id the next time.
var foundingClusterIDKey = []byte("LeasefenceFoundingClusterID")

// setFoundingClusterID records id in store (foundingClusterIDKey).
func setFoundingClusterID(store *raftboltdb.BoltStore, id string) error {
	if err := store.Set(foundingClusterIDKey, []byte(id)); err != nil {
		return fmt.Errorf("cluster: record the cluster id: %w", err)
	}
	return nil
}

// foundingClusterID returns the id setFoundingClusterID recorded, "" when
// none was.
func foundingClusterID(store *raftboltdb.BoltStore) (string, error) {
	v, err := store.Get(foundingClusterIDKey)
	if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return "", fmt.Errorf("cluster: read the cluster id: %w", err)
	}
	return string(v), nil
}

// lostStateError is the refusal of a node whose identity file says it was
// a member but whose Raft state is gone.
func lostStateError(dir string, id *Identity, what string) error {
	return fmt.Errorf("cluster: %s has %s (node %q of cluster %q, written %s) but %s: "+
		"this node would forget its term and vote and must not start as a new one. "+
		"Replace it: remove it from the cluster (leasectl members remove %s), empty the data dir, "+
		"and start it with --join (docs/OPERATIONS.md, Replacing a dead node)",
		dir, IdentityFile, id.NodeID, id.ClusterID, id.Created.Format(time.RFC3339), what, id.NodeID)
}
