package fence_test

import (
	"context"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/internal/fencetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemoryGuard(t *testing.T) {
	fencetest.Run(t, func(t *testing.T, rule fence.Rule) fencetest.Subject {
		g := fence.NewMemory(rule)
		var mu sync.Mutex
		logs := map[string][]uint64{}
		return fencetest.Subject{
			Write: func(ctx context.Context, tok fence.Token, fail, panics bool) error {
				return g.Do(ctx, tok, func(context.Context) error {
					if fail {
						return fencetest.ErrEffect
					}
					if panics {
						panic("effect panicked")
					}
					mu.Lock()
					defer mu.Unlock()
					logs[tok.Scope] = append(logs[tok.Scope], tok.Value)
					return nil
				})
			},
			Log: func(t *testing.T, scope string) []uint64 {
				mu.Lock()
				defer mu.Unlock()
				return append([]uint64(nil), logs[scope]...)
			},
			Highest: func(t *testing.T, scope string) uint64 { return g.Highest(scope) },
		}
	})
}

func TestMemoryGuardWaiterGivesUpWhenItsContextEnds(t *testing.T) {
	g := fence.NewMemory(fence.AtLeast)
	tok := fence.Token{Scope: "s", Value: 1}
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- g.Do(context.Background(), tok, func(context.Context) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Do(ctx, tok, func(context.Context) error { t.Error("effect ran while another held the scope"); return nil }); err != context.Canceled {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
