package fsm

import (
	"errors"
	"testing"
	"time"
)

// ValidateTTL: within the entry's bounds, and above twice the skew margin
// at every layer; without bounds (apply) only the latter.
func TestValidateTTLKeepsBoundsAndTheSkewMargin(t *testing.T) {
	entry := TTLBounds{Min: 2 * time.Second, Max: time.Minute, SkewMargin: 500 * time.Millisecond}
	apply := TTLBounds{SkewMargin: 500 * time.Millisecond}
	for _, tt := range []struct {
		ttl              time.Duration
		atEntry, atApply bool
	}{
		{-time.Second, false, false},
		{0, false, false},
		{time.Second, false, false},
		{time.Second + 1, false, true},
		{2*time.Second - 1, false, true},
		{2 * time.Second, true, true},
		{time.Minute, true, true},
		{time.Minute + 1, false, true},
	} {
		for _, c := range []struct {
			b    TTLBounds
			want bool
		}{{entry, tt.atEntry}, {apply, tt.atApply}} {
			err := ValidateTTL(tt.ttl, c.b)
			if (err == nil) != c.want {
				t.Errorf("ttl %v under %+v: %v, want accepted=%v", tt.ttl, c.b, err, c.want)
			}
			var fe *FieldError
			if err != nil && (!errors.As(err, &fe) || fe.Field != "ttl" || !errors.Is(err, ErrInvalidArgument)) {
				t.Errorf("ttl %v: %v is not an invalid-argument ttl FieldError", tt.ttl, err)
			}
		}
	}
}
