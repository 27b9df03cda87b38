// Command bridge is delay-bridge: arbitrary per-message delays for Kafka and RabbitMQ.
//
//	bridge run -c bridge.yaml [--set key=value]...   the service
//	bridge dev                                       a self-contained try-out
//	bridge ctl [--addr URL] [--token T] COMMAND      client of the admin API
//	bridge check-config -c bridge.yaml               validate and print the configuration
//	bridge version
//
// Exit codes: 0 success, 1 runtime error (including an invalid configuration), 2 usage
// error.
//
// Subcommands register themselves from their own files (see register), so adding one
// touches no other file.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// command is one subcommand. run gets the arguments after the subcommand's name and
// returns the exit code; it writes results to stdout and diagnostics to stderr.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

// register adds a subcommand; call it from an init function in the subcommand's file:
//
//	func init() { register("dev", "run a self-contained try-out", runDev) }
func register(name, summary string, run func(args []string, stdout, stderr io.Writer) int) {
	if _, dup := commands[name]; dup {
		panic("bridge: subcommand registered twice: " + name)
	}
	commands[name] = command{name: name, summary: summary, run: run}
}

// order lists the well-known subcommands first in the usage text; others follow sorted.
var order = []string{"run", "dev", "ctl", "check-config", "version"}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return c.run([]string{"--help"}, stdout, stderr)
			}
		}
		usage(stdout)
		return exitOK
	case "-v", "--version":
		args = []string{"version"}
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "bridge: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return c.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "delay-bridge: arbitrary per-message delays for Kafka and RabbitMQ.\n\n")
	fmt.Fprintf(w, "Usage: bridge COMMAND [ARGS]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		ia, ib := slices.Index(order, a), slices.Index(order, b)
		switch {
		case ia >= 0 && ib >= 0:
			return ia - ib
		case ia >= 0:
			return -1
		case ib >= 0:
			return 1
		}
		return strings.Compare(a, b)
	})
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "\nRun 'bridge COMMAND --help' for a command's flags.\n")
}

// newFlags returns a flag set for a subcommand whose --help prints synopsis, the
// description and the flags.
func newFlags(name, synopsis, description string) *pflag.FlagSet {
	fs := pflag.NewFlagSet("bridge "+name, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: bridge %s %s\n\n%s\n", name, synopsis, strings.TrimSpace(description))
		if fs.HasAvailableFlags() {
			fmt.Fprintf(w, "\nFlags:\n%s", fs.FlagUsages())
		}
	}
	return fs
}

// parseFlags parses args. It returns ok=false with the exit code when the command must
// stop: 0 after --help (usage on stdout), 2 on a usage error (message and usage on
// stderr).
func parseFlags(fs *pflag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, pflag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return exitOK, false
	default:
		return usageError(fs, stderr, "%v", err), false
	}
}

// usageError prints a usage error and the command's usage, and returns exitUsage.
func usageError(fs *pflag.FlagSet, stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "%s: %s\n\n", fs.Name(), fmt.Sprintf(format, args...))
	fs.SetOutput(stderr)
	fs.Usage()
	return exitUsage
}

// environ is the environment configuration is loaded from; tests replace it.
var environ = os.Environ
