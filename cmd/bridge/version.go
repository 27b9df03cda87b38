package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time: go build -ldflags "-X main.version=1.2.3".
var version = "dev"

func init() {
	register("version", "print the version and the Go version it was built with", runVersion)
}

// buildVersion is version, or the module version when installed with
// `go install …@vX.Y.Z` and not set by -ldflags.
func buildVersion() string {
	if version != "dev" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return version
}

// revision is the VCS commit the binary was built from ("" if unknown), with
// "+dirty" when the work tree had changes.
func revision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" && dirty {
		rev += "+dirty"
	}
	return rev
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("version", "", "Print the bridge version, the Go version it was built with, and the commit.")
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	fmt.Fprintf(stdout, "delay-bridge %s\n", buildVersion())
	fmt.Fprintf(stdout, "go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if rev := revision(); rev != "" {
		fmt.Fprintf(stdout, "commit: %s\n", rev)
	}
	return exitOK
}
