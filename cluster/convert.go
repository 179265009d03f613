package cluster

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
)

func toAPILease(l fsm.Lease) *api.Lease {
	id := l.ID
	return &api.Lease{
		Id:          id[:],
		Resource:    l.Resource,
		Scope:       l.Scope,
		Token:       l.Token,
		Holder:      l.Holder,
		Ttl:         durationpb.New(time.Duration(l.TTL)),
		GrantedAtNs: l.GrantedAt,
		ExpiresAtNs: l.ExpiresAt,
	}
}

func leaseIDOf(b []byte) (id [fsm.LeaseIDLen]byte, err error) {
	if err := fsm.ValidateLeaseID(b); err != nil {
		return id, err
	}
	copy(id[:], b)
	return id, nil
}
