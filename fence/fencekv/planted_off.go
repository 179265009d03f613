//go:build !plantedbugs

package fencekv

// TestingKnobs are per-server test switches (Config.Testing). In a build
// without the plantedbugs tag there are none: the type is empty and every
// planted branch compiles away.
type TestingKnobs struct{}

func (*TestingKnobs) validate() error { return nil }

func (*TestingKnobs) planted(string) bool { return false }
