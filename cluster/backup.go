package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/grpc"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
)

// A backup file is: the magic line, the Raft index it reflects (8 bytes,
// big endian), the fsm snapshot, and the SHA-256 of everything before it.
var backupMagic = []byte("leasefence-backup v1\n")

// DefaultBumpTokens is how far a restore raises the token floor above the
// backup's highest token unless told otherwise: far above any number of
// grants a cluster makes between a backup and its loss.
const DefaultBumpTokens = uint64(1) << 32

// A restore's floor is at least its epoch's line: (RestoreEpoch -
// EpochBase) × EpochTokens. EpochTokens (2^32) is more grants than one
// scope makes in a second, and no bigger than the default bump. So a
// cluster restored at epoch e starts at the line of e, or at most the
// bump above its backup's tokens, themselves below the line of the
// backup's cluster's restore plus its grants: every token granted before
// a second s stays below s's line, unless one scope granted 2^32 in a
// second. A restore begun in a later second than another,
// from any backup, therefore beats every token the other's cluster
// granted before it was lost (the same file restored again, a fall back
// to an older backup after a chain of restores), and the line does not
// pile up along a chain. A bump above EpochTokens would break that
// (seedFromBackup refuses it), as would an epoch not later than the
// restore the backup descends from (refused when the backup's floor shows
// it).
const (
	EpochTokens = uint64(1) << 32
	// EpochBase is the epoch whose line is 0 (2023-11-14T22:13:20Z): no
	// restore is older, and tokens stay small (about 4.1 x 10^17 at the
	// end of 2026).
	EpochBase = uint64(1_700_000_000)
	// MaxRestoreEpoch bounds Config.RestoreEpoch (the year 2091): the line
	// stays below 2^63, so tokens fit a signed 64-bit column.
	MaxRestoreEpoch = EpochBase + 1<<31 - 1
)

// epochLine is the least floor of a restore at epoch (0 before EpochBase).
func epochLine(epoch uint64) uint64 {
	if epoch < EpochBase {
		return 0
	}
	return (epoch - EpochBase) * EpochTokens
}

// ErrBadBackup is returned for a backup file that is truncated, altered or
// not a backup at all.
var ErrBadBackup = errors.New("cluster: bad backup file")

// Snapshot implements api.ClusterServiceServer: a consistent backup,
// streamed in chunks, taken on the leader after a linearizable read so it
// reflects every acknowledged write.
func (s *clusterService) Snapshot(_ *api.SnapshotRequest, stream grpc.ServerStreamingServer[api.SnapshotChunk]) error {
	ctx, _, local, err := adminAtLeader(stream.Context(), s.n, func(ctx context.Context, c api.ClusterServiceClient) (struct{}, error) {
		up, err := c.Snapshot(ctx, &api.SnapshotRequest{})
		if err != nil {
			return struct{}{}, err
		}
		for {
			c, err := up.Recv()
			if err == io.EOF {
				return struct{}{}, nil
			}
			if err != nil {
				return struct{}{}, err
			}
			if err := stream.Send(c); err != nil {
				return struct{}{}, err
			}
		}
	})
	if !local {
		return err
	}
	floor, err := s.n.readIndex(ctx)
	if err != nil {
		return toStatus(err)
	}
	var (
		sn    *fsm.Snapshot
		index uint64
	)
	if !s.n.sm.readAt(floor, func(st *fsm.State, at uint64) { sn, index = st.Snapshot(), at }) {
		// The state went back behind the read's index (an older snapshot
		// installed, as only a follower does).
		return toStatus(s.n.notLeader())
	}
	var buf bytes.Buffer
	if err := writeBackup(&buf, index, sn); err != nil {
		return toStatus(err)
	}
	data := buf.Bytes()
	sum := sha256.Sum256(data)
	const chunk = 256 << 10
	for off := 0; ; off += chunk {
		end := min(off+chunk, len(data))
		c := &api.SnapshotChunk{Data: data[off:end], Index: index, Size: uint64(len(data) + len(sum))}
		if end == len(data) {
			c.Data = append(append([]byte(nil), data[off:end]...), sum[:]...)
			c.Sha256 = hex.EncodeToString(sum[:])
		}
		if err := stream.Send(c); err != nil {
			return err
		}
		if end == len(data) {
			return nil
		}
	}
}

// writeBackup writes a backup without its checksum trailer.
func writeBackup(w io.Writer, index uint64, sn *fsm.Snapshot) error {
	var idx [8]byte
	binary.BigEndian.PutUint64(idx[:], index)
	if _, err := w.Write(backupMagic); err != nil {
		return err
	}
	if _, err := w.Write(idx[:]); err != nil {
		return err
	}
	_, err := sn.WriteTo(w)
	return err
}

// ReadBackup checks a backup file (magic, checksum, content) and returns
// the state it holds and the Raft index it reflects.
func ReadBackup(path string) (*fsm.State, uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	return readBackup(path, data)
}

// readBackup is ReadBackup of the bytes data read from path; opts build
// the state (a node's seed: its fsm.TestingKnobs).
func readBackup(path string, data []byte, opts ...fsm.Option) (*fsm.State, uint64, error) {
	if len(data) < len(backupMagic)+8+sha256.Size || !bytes.HasPrefix(data, backupMagic) {
		return nil, 0, fmt.Errorf("%w: %s is not a leasefence backup", ErrBadBackup, path)
	}
	body, trailer := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], trailer) {
		return nil, 0, fmt.Errorf("%w: %s fails its checksum (truncated or altered)", ErrBadBackup, path)
	}
	index := binary.BigEndian.Uint64(body[len(backupMagic):])
	st, err := fsm.Restore(bytes.NewReader(body[len(backupMagic)+8:]), opts...)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrBadBackup, err)
	}
	return st, index, nil
}

// restoreBump is the bump a restore adds to the backup's highest token.
func (n *Node) restoreBump() uint64 {
	if n.cfg.BumpTokens == 0 && !n.cfg.AllowZeroBump {
		return DefaultBumpTokens
	}
	return n.cfg.BumpTokens
}

// restoreEpoch is the epoch a restore uses (0 when planted to ignore it).
func (n *Node) restoreEpoch() uint64 {
	if n.planted(BugRestoreIgnoresEpoch) {
		return 0 // the restore before epochs: every restore of one file alike
	}
	return n.cfg.RestoreEpoch
}

// restoreSeed is what a restore from the backup bytes data adds to the
// bootstrap list to derive the new cluster's id (clusterIDOf): a digest of
// the file, the bump and the epoch.
func (n *Node) restoreSeed(data []byte) string {
	seed := fmt.Sprintf("restore %x bump %d", sha256.Sum256(data), n.restoreBump())
	if e := n.restoreEpoch(); e != 0 { // 0: planted, the seed before epochs
		seed += fmt.Sprintf(" epoch %d", e)
	}
	return seed
}

// seedFromBackup makes a fresh data dir start from a backup: the state,
// with its token floor raised to the backup's highest token plus bump, and
// to at least its epoch's line (epochLine; fsm.State.RaiseFloor and
// RaiseFloorTo: every scope's next token, a scope the backup never saw
// included, beats every token the lost cluster issued if no scope made
// more than bump grants after the backup; the epoch's line beats every
// token of a cluster an earlier restore started, of this backup or any
// other, which the bump alone did not: it was the same for every restore
// of one file), becomes a Raft snapshot at
// index 1 of a new cluster whose members are cfg.Bootstrap. Every founding
// node of the new cluster is seeded from the same file, as with etcd's
// snapshot restore.
//
// Before anything else it stores the new cluster's id
// (setFoundingClusterID), derived from the bootstrap list and a digest of
// the file's bytes, the bump and the epoch (clusterIDOf): founding nodes
// given another file, bump or epoch get another cluster id (so a node left
// over from an earlier restore of the same file never joins a later one),
// and the transport refuses
// Raft RPCs between nodes of different ids, so they can never form one
// cluster whose leader grants below a floor a resource has seen. Stored
// first, the id survives a start that stops before the identity file is
// written.
func (n *Node) seedFromBackup(store *raftboltdb.BoltStore, snaps raft.SnapshotStore) error {
	cfg := n.cfg
	data, err := os.ReadFile(cfg.RestoreFrom)
	if err != nil {
		return err
	}
	st, index, err := readBackup(cfg.RestoreFrom, data, n.fsmOptions()...)
	if err != nil {
		return err
	}
	bump := n.restoreBump()
	if cfg.RestoreEpoch == 0 {
		return fmt.Errorf("cluster: restore from %s needs its restore epoch (--restore-epoch): the Unix time in seconds when the restore began, the same on every founding node", cfg.RestoreFrom)
	}
	if bump > EpochTokens {
		return fmt.Errorf("cluster: restore from %s: --bump-tokens %d is above %d: the floor could then pass the line of a later restore's epoch, which would reissue this cluster's tokens (the epoch's line already covers the grants after the backup)", cfg.RestoreFrom, bump, EpochTokens)
	}
	restoreEpoch := n.restoreEpoch()
	if line := epochLine(restoreEpoch); restoreEpoch != 0 && st.Floor() > 0 && st.Floor() >= line {
		// The backup descends from a restore begun in this second or
		// later: this epoch is not later than every earlier restore's
		// (a clock behind, an epoch reused), and the line would not
		// beat that restore's cluster.
		return fmt.Errorf("cluster: restore from %s: the backup's token floor %d is at or above the line %d of --restore-epoch %d: it descends from a restore at this epoch or later; give the Unix time of now, later than every earlier restore's", cfg.RestoreFrom, st.Floor(), line, restoreEpoch)
	}
	floor, err := st.RaiseFloor(bump)
	if err != nil {
		return fmt.Errorf("cluster: restore from %s: %w (use a smaller --bump-tokens)", cfg.RestoreFrom, err)
	}
	floor = st.RaiseFloorTo(epochLine(restoreEpoch)) // Validate bounds the epoch: below 2^63
	// The backup's cluster recorded its own members as having served; the
	// new cluster's have served nothing of it yet (a founder of the new
	// cluster starting late must not be taken for a lost one).
	st.ClearServed()
	if err := setFoundingClusterID(store, clusterIDOf(cfg.Bootstrap, n.restoreSeed(data))); err != nil {
		return err
	}
	var servers []raft.Server
	for id, addr := range cfg.Bootstrap {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(addr)})
	}
	conf := raft.Configuration{Servers: servers}
	sink, err := snaps.Create(raft.SnapshotVersionMax, 1, 1, conf, 1, n.tr)
	if err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	snap := &fsmSnapshot{index: 1, sn: st.Snapshot(), log: n.log}
	if err := snap.Persist(sink); err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	// The snapshot's term is 1: no vote may be cast in an older term.
	if err := store.SetUint64([]byte("CurrentTerm"), 1); err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	n.log.Info("restored from backup", "file", cfg.RestoreFrom, "backup-index", index, "bump", bump, "restore-epoch", cfg.RestoreEpoch, "token-floor", floor, "leases", st.Len())
	return nil
}
