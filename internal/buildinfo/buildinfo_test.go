package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFromReadsVersionCommitAndGo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.2.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "6cf3111a"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := From(bi, true).Text(), "version v0.2.0\ncommit  6cf3111a (modified)\ngo      go1.26.8\n"; got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
	if got := From(nil, false); got != (Info{Version: "unknown", Commit: "unknown", Go: runtime.Version()}) {
		t.Errorf("no build info: %+v", got)
	}
}
