//go:build nodev

package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// Built with -tags nodev: the binary does not contain `bridge dev` (nor the embedded
// Kafka and Redis it links). The command stays in the tree, hidden, to say so.

func init() { addCommand(newDevCmd) }

func newDevCmd(env *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:                "dev",
		Short:              "not in this binary (built with -tags nodev)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintln(env.stderr, "bridge dev: this binary was built without dev mode (-tags nodev); "+
				"build one without that tag (go build ./cmd/bridge) to run the try-out")
			return &exitCodeError{exitUsage}
		},
	}
}
