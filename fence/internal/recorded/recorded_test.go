package recorded_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/internal/recorded"
)

func TestRunRecordsWhenTheHandlerReturns(t *testing.T) {
	g := fence.NewMemory(fence.AtLeast)
	ran, err := recorded.Run(context.Background(), g, fence.Token{Scope: "s", Value: 3}, func(context.Context) {})
	if !ran || err != nil || g.Highest("s") != 3 {
		t.Fatalf("ran %v, err %v, highest %d; want true, nil, 3", ran, err, g.Highest("s"))
	}
}

func TestRunRecordsAndRepanicsWithTheSameValueWhenTheHandlerPanics(t *testing.T) {
	g := fence.NewMemory(fence.AtLeast)
	boom := errors.New("boom")
	func() {
		defer func() {
			if p := recover(); p != boom {
				t.Fatalf("recovered %v, want the handler's own value", p)
			}
		}()
		recorded.Run(context.Background(), g, fence.Token{Scope: "s", Value: 3}, func(context.Context) { panic(boom) })
		t.Fatal("Run returned after the handler panicked")
	}()
	if h := g.Highest("s"); h != 3 {
		t.Fatalf("highest = %d after a panicking handler, want 3", h)
	}
}

func TestRunDoesNotRunTheHandlerForARefusedToken(t *testing.T) {
	g := fence.NewMemory(fence.AtLeast)
	if _, err := recorded.Run(context.Background(), g, fence.Token{Scope: "s", Value: 5}, func(context.Context) {}); err != nil {
		t.Fatal(err)
	}
	called := false
	ran, err := recorded.Run(context.Background(), g, fence.Token{Scope: "s", Value: 4}, func(context.Context) { called = true })
	if ran || called || !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("ran %v, called %v, err %v; want a refusal without running", ran, called, err)
	}
}
