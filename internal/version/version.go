// Package version reports the build's version.
package version

import "runtime/debug"

// Version is set at link time (-ldflags "-X github.com/kibotos/kibotos/internal/version.Version=v0.1.0");
// otherwise it falls back to the module version recorded by the Go toolchain.
var Version = ""

// String returns the version of this binary.
func String() string {
	if Version != "" {
		return Version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}
