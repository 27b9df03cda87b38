package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// release is the version of this source tree (CHANGELOG.md).
const release = "0.1.0"

// version overrides release when set at build time: go build -ldflags "-X main.version=1.2.3".
var version = ""

func init() { addCommand(newVersionCmd) }

// buildVersion is version when set by -ldflags, else the module version when installed
// with `go install …@vX.Y.Z`, else release.
func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return release
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

// versionText is what `bridge version` and `bridge --version` print.
func versionText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "delay-bridge %s\n", buildVersion())
	fmt.Fprintf(&b, "go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if rev := revision(); rev != "" {
		fmt.Fprintf(&b, "commit: %s\n", rev)
	}
	return b.String()
}

func newVersionCmd(*cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version and the Go version it was built with",
		Long:  "Print the bridge version, the Go version it was built with, and the commit.",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := io.WriteString(cmd.OutOrStdout(), versionText())
			return err
		},
	}
}
