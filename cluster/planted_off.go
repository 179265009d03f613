//go:build !plantedbugs

package cluster

// planted is false in every build without the plantedbugs tag, so each
// planted branch compiles away.
func planted(string) bool { return false }

// plantedList is empty: no defect can be switched on.
var plantedList []string
