//go:build !plantedbugs

package fsm

// planted is false in every build without the plantedbugs tag, so each
// planted branch compiles away.
func planted(string) bool { return false }
