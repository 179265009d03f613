// Package buildinfo is the one source of "what build is this" for
// leasectl version and leased --version: the module version, the commit and
// the Go version the binary was built with, from runtime/debug.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Dev is the version a build from a checkout reports: the release line in
// development. cluster.Version, which a node's Status reports, is the same
// (a test in cmd/leased holds them together).
const Dev = "0.1.0-dev"

// Info describes a build. Fields the binary does not carry read "unknown"
// (a build without VCS stamping, -buildvcs=false, has no commit).
type Info struct {
	Version  string
	Commit   string
	Modified bool
	Go       string
}

// Read returns the running binary's build.
func Read() Info { return From(debug.ReadBuildInfo()) }

// From returns the build described by bi (ok false: no build information).
func From(bi *debug.BuildInfo, ok bool) Info {
	info := Info{Version: "unknown", Commit: "unknown", Go: runtime.Version()}
	if !ok || bi == nil {
		return info
	}
	switch v := bi.Main.Version; v {
	case "", "(devel)":
		// Built from a checkout, not a tagged module version: say which
		// release line, as a node's Status does (cluster.Version).
		info.Version = Dev
	default:
		info.Version = v
	}
	if bi.GoVersion != "" {
		info.Go = bi.GoVersion
	}
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			info.Commit = kv.Value
		case "vcs.modified":
			info.Modified = kv.Value == "true"
		}
	}
	return info
}

// Text is the build as aligned "key value" lines, the form both commands
// print:
//
//	version v0.2.0
//	commit  6cf3111a... (modified)
//	go      go1.26.8
func (i Info) Text() string {
	commit := i.Commit
	if i.Modified {
		commit += " (modified)"
	}
	return fmt.Sprintf("version %s\ncommit  %s\ngo      %s\n", i.Version, commit, i.Go)
}
