package fence

import (
	"context"
	"sync"
)

// Memory is an in-process Guard: the highest tokens live in memory and are
// lost when the process ends. Use it in tests, and to fence a resource that
// lives and dies with the process. Safe for concurrent use; effects of one
// scope run one at a time, effects of different scopes in parallel.
type Memory struct {
	rule   Rule
	mu     sync.Mutex
	scopes map[string]*memScope
}

type memScope struct {
	// sem is a one-slot semaphore held for check, effect and record, so a
	// waiter can give up when its context ends.
	sem     chan struct{}
	highest uint64 // guarded by sem
}

// NewMemory returns an empty memory guard deciding with rule.
func NewMemory(rule Rule) *Memory {
	return &Memory{rule: rule, scopes: map[string]*memScope{}}
}

var _ Guard = (*Memory)(nil)

func (m *Memory) scope(name string) *memScope {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.scopes[name]
	if !ok {
		s = &memScope{sem: make(chan struct{}, 1)}
		m.scopes[name] = s
	}
	return s
}

// Do implements Guard. It waits for earlier effects of the same scope, or
// returns ctx.Err() if ctx ends first. A panic in effect leaves the token
// unrecorded and the scope usable.
func (m *Memory) Do(ctx context.Context, tok Token, effect func(context.Context) error) error {
	if err := tok.Validate(); err != nil {
		return err
	}
	s := m.scope(tok.Scope)
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.sem }()
	if !m.rule.Admits(tok.Value, s.highest) {
		return &StaleTokenError{Scope: tok.Scope, Presented: tok.Value, Highest: s.highest}
	}
	if err := effect(ctx); err != nil {
		return err
	}
	if tok.Value > s.highest {
		s.highest = tok.Value
	}
	return nil
}

// Highest returns the highest token accepted in scope, 0 if none.
func (m *Memory) Highest(scope string) uint64 {
	s := m.scope(scope)
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	return s.highest
}
