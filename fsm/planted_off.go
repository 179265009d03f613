//go:build !plantedbugs

package fsm

// TestingKnobs are per-State test switches (WithTestingKnobs). In a build
// without the plantedbugs tag there are none: the type is empty and every
// planted branch compiles away.
type TestingKnobs struct{}

// Validate accepts the empty knobs.
func (*TestingKnobs) Validate() error { return nil }

func (*TestingKnobs) planted(string) bool { return false }
