//go:build !plantedbugs

package client

// TestingKnobs are per-client test switches. In a build without the
// plantedbugs tag there are none: the type is empty and every planted
// branch compiles away.
type TestingKnobs struct{}

func (*TestingKnobs) validate() error { return nil }

func (*TestingKnobs) planted(string) bool { return false }

func (*TestingKnobs) clock(c Clock) Clock { return c }
