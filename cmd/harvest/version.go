package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print Harvest's version: the module version, the VCS revision it was built from, and the Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, _ := debug.ReadBuildInfo()
			_, err := fmt.Fprint(cmd.OutOrStdout(), versionText(info, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH))
			return err
		},
	}
}

// versionText describes a build: the main module's version ("(devel)" for
// a build from a checkout), the VCS revision and commit time the go
// command stamped into it, "modified" when the checkout had uncommitted
// changes, and the Go toolchain and platform.
func versionText(info *debug.BuildInfo, goVersion, platform string) string {
	version, revision, at, modified := "unknown", "", "", false
	if info != nil {
		if info.Main.Version != "" {
			version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "harvest %s\n", version)
	if revision == "" {
		b.WriteString("revision unknown (the build recorded none: built outside a git checkout, by go run, or with -buildvcs=false)")
	} else {
		fmt.Fprintf(&b, "revision %s", revision)
	}
	if at != "" {
		fmt.Fprintf(&b, " (%s)", at)
	}
	if modified {
		b.WriteString(", modified")
	}
	fmt.Fprintf(&b, "\n%s %s\n", goVersion, platform)
	return b.String()
}
