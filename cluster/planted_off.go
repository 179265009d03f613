//go:build !plantedbugs

package cluster

import "github.com/leasefence/leasefence/fsm"

// TestingKnobs are per-node test switches (Config.Testing). In a build
// without the plantedbugs tag there are none: the type is empty and every
// planted branch compiles away.
type TestingKnobs struct{}

func (*TestingKnobs) validate() error { return nil }

func (*TestingKnobs) planted(string) bool { return false }

func (*TestingKnobs) fsmKnobs() fsm.TestingKnobs { return fsm.TestingKnobs{} }

// plantedList is empty: no defect can be switched on.
func (*TestingKnobs) plantedList() []string { return nil }
