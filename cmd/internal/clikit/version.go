package clikit

import "runtime/debug"

// Version is set at build time with -ldflags "-X ...clikit.Version=..."
// (make build, make release). Without it, the Go toolchain's own stamp
// says which build this is: the module's version for `go install
// github.com/awcp/awcp/cmd/awcp-ctl@v1.2.3`, the commit for a `go build`
// in a clone.
var Version = "dev"

func init() {
	if Version == "dev" {
		Version = stampedVersion()
	}
}

func stampedVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision" && len(s.Value) >= 12:
			rev = s.Value[:12]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if rev == "" {
		return "dev"
	}
	return "dev-" + rev + dirty
}
