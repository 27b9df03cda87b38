// Command bridge is delay-bridge: arbitrary per-message delays for Kafka and RabbitMQ.
//
//	bridge run -c bridge.yaml [--set key=value]...   the service
//	bridge dev                                       a self-contained try-out
//	bridge ctl [--addr URL] [--token T] COMMAND      client of the admin API
//	bridge check-config -c bridge.yaml               validate and print the configuration
//	bridge version
//	bridge completion bash|zsh|fish|powershell       shell completion script
//
// Exit codes: 0 success, 1 runtime error (including an invalid configuration), 2 usage
// error.
//
// The command tree is github.com/spf13/cobra's: each subcommand's file adds itself to
// subcommands from an init function, so adding one touches no other file. `bridge dev`
// (cmd/bridge/internal/dev, which links an embedded Kafka and Redis) is left out of a
// binary built with -tags nodev; `bridge run` never reaches it either way.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	_ "time/tzdata" // the tz database, for CRON_TZ= in schedules: the image is FROM scratch

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// subcommands build the subcommands; each file appends its own from init (see
// addCommand). The usage text lists them in the order of order, others after.
var subcommands []func(env *cliEnv) *cobra.Command

var order = []string{"run", "dev", "ctl", "check-config", "version"}

func rank(name string) int {
	if i := slices.Index(order, name); i >= 0 {
		return i
	}
	return len(order)
}

// addCommand registers a subcommand constructor; call it from an init function.
func addCommand(build func(env *cliEnv) *cobra.Command) { subcommands = append(subcommands, build) }

// cliEnv is what commands read and write besides their flags; tests replace its parts.
type cliEnv struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// terminal reports whether stdin is a terminal a person can answer a prompt on.
	terminal func() bool
}

func main() {
	os.Exit(execute(os.Args[1:], &cliEnv{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, terminal: stdinIsTerminal}))
}

// usageError is a usage error (exit 2): the message is printed with the command's usage.
type usageError struct {
	cmd *cobra.Command
	msg string
}

func (e *usageError) Error() string { return e.msg }

func usageErrorf(cmd *cobra.Command, format string, args ...any) error {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, args...)}
}

// exitError carries an exit code for an error already reported (exit 1 after printing
// the configuration problems, say).
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// execute runs the command line args and returns the exit code.
func execute(args []string, env *cliEnv) int {
	root := newRoot(env)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	var ue *usageError
	var ce *exitCodeError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ce):
		return ce.code
	case errors.As(err, &ue):
		if ue.cmd != nil {
			cmd = ue.cmd
		}
		fmt.Fprintf(env.stderr, "%s: %s\n\n", cmd.CommandPath(), ue.msg)
		cmd.SetOut(env.stderr)
		_ = cmd.Usage()
		return exitUsage
	default:
		fmt.Fprintf(env.stderr, "%s: %v\n", cmd.CommandPath(), err)
		return exitError
	}
}

const rootLong = `delay-bridge: arbitrary per-message delays for Kafka and RabbitMQ.

Messages with an x-delay (or x-deliver-at) header on a route's delay topic or queue are
parked in Redis and published to the route's target at their due time.`

func newRoot(env *cliEnv) *cobra.Command {
	root := &cobra.Command{
		Use:           "bridge",
		Short:         "arbitrary per-message delays for Kafka and RabbitMQ",
		Long:          rootLong,
		Version:       buildVersion(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf(cmd, "missing command")
		},
	}
	root.SetVersionTemplate(versionText())
	root.SetIn(env.stdin)
	root.SetOut(env.stdout)
	root.SetErr(env.stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &usageError{cmd: cmd, msg: err.Error()} })
	cobra.EnableCommandSorting = false
	cmds := make([]*cobra.Command, 0, len(subcommands))
	for _, build := range subcommands {
		cmds = append(cmds, build(env))
	}
	slices.SortStableFunc(cmds, func(a, b *cobra.Command) int { return rank(a.Name()) - rank(b.Name()) })
	root.AddCommand(cmds...)
	// cobra's `completion bash|zsh|fish|powershell`; without a known shell, a usage error.
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Args = noArgs
			c.RunE = func(cmd *cobra.Command, _ []string) error {
				return usageErrorf(cmd, "missing shell: bash, zsh, fish or powershell")
			}
		}
	}
	return root
}

// noArgs refuses any positional argument as a usage error; on a command with
// subcommands the argument is an unknown subcommand.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.HasSubCommands() {
		msg := fmt.Sprintf("unknown command %q", args[0])
		cmd.SuggestionsMinimumDistance = 2
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf(" (did you mean %q?)", s[0])
		}
		return usageErrorf(cmd, "%s", msg)
	}
	return usageErrorf(cmd, "unexpected argument %q", args[0])
}

// group makes cmd a command that only holds subcommands: without one (or with an
// unknown one) it is a usage error.
func group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = noArgs
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return usageErrorf(cmd, "missing COMMAND") }
	return cmd
}

// exactArgs wants n positional arguments (named in the command's Use line).
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) > n:
			return usageErrorf(cmd, "unexpected argument %q", args[n])
		case len(args) < n:
			return usageErrorf(cmd, "missing %s", strings.Join(argNames(cmd, n)[len(args):], " "))
		}
		return nil
	}
}

// argNames are the first n positional arguments named in cmd's Use line, the leading
// upper-case words after the name ("get ID" -> ID); unnamed ones are "ARGUMENT".
func argNames(cmd *cobra.Command, n int) []string {
	var names []string
	for _, f := range strings.Fields(cmd.Use)[1:] {
		if f != strings.ToUpper(f) || strings.ContainsAny(f[:1], "-[(") {
			break
		}
		names = append(names, f)
	}
	for len(names) < n {
		names = append(names, "ARGUMENT")
	}
	return names[:n]
}

// unsorted keeps a command's flags in the order they were defined.
func unsorted(cmd *cobra.Command) *cobra.Command {
	cmd.Flags().SortFlags = false
	cmd.PersistentFlags().SortFlags = false
	return cmd
}

// environ is the environment configuration is loaded from; tests replace it.
var environ = os.Environ

// stdinIsTerminal reports whether standard input is a character device (a terminal).
func stdinIsTerminal() bool {
	fi, err := os.Stdin.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
