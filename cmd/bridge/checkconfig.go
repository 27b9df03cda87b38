package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/delaybridge/delay-bridge/app"
	"github.com/delaybridge/delay-bridge/config"
)

func init() { addCommand(newCheckConfigCmd) }

// configFlags are the flags run and check-config share.
type configFlags struct {
	file *string
	set  *[]string
}

func addConfigFlags(fs *pflag.FlagSet) configFlags {
	return configFlags{
		file: fs.StringP("config", "c", "", "YAML configuration `file` (optional: defaults, DELAYBRIDGE_* environment and --set also configure)"),
		set:  fs.StringArray("set", nil, "override one `key=value`, e.g. --set scheduler.tick=2ms or --set routes.0.to.kafka.topic=x (repeatable; wins over file and environment)"),
	}
}

func (c configFlags) load() (config.Config, error) {
	cfg, err := config.Load(config.LoadOptions{File: *c.file, Env: environ(), Set: *c.set})
	if err == nil {
		err = app.CheckSchedules(cfg) // the schedules' specs: config, a leaf, has no cron parser
	}
	return cfg, err
}

// configFileCompletion completes -c with YAML files.
func configFileCompletion(cmd *cobra.Command) {
	_ = cmd.MarkFlagFilename("config", "yaml", "yml")
}

// printConfigErrors lists every problem, one per line.
func printConfigErrors(w io.Writer, prefix string, err error) {
	fes := config.FieldErrors(err)
	noun := "problems"
	if len(fes) == 1 {
		noun = "problem"
	}
	fmt.Fprintf(w, "%s: invalid configuration (%d %s):\n", prefix, len(fes), noun)
	for _, fe := range fes {
		fmt.Fprintf(w, "  - %s\n", fe)
	}
}

const checkConfigHelp = `Load the configuration exactly as 'bridge run' would (defaults < YAML file < DELAYBRIDGE_*
environment < --set flags), validate it, and print the effective configuration as YAML
with secrets masked (redis.password, redis.sentinel_password, kafka.sasl.password,
admin.token and the password in amqp.url). On an invalid configuration, list every
problem with its key and where the value came from, and exit 1; no message shows a
secret (a mistyped one is described by its type). Credentials in redis.addrs or
kafka.brokers, and an amqp.url without a scheme, are refused. The file may also be given
as the only argument.`

func newCheckConfigCmd(env *cliEnv) *cobra.Command {
	cmd := unsorted(&cobra.Command{
		Use:   "check-config [-c FILE | FILE] [--set key=value]...",
		Short: "validate a configuration and print it, secrets masked",
		Long:  checkConfigHelp,
	})
	cf := addConfigFlags(cmd.Flags())
	quiet := cmd.Flags().BoolP("quiet", "q", false, "print nothing on success")
	configFileCompletion(cmd)
	cmd.ValidArgsFunction = func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"yaml", "yml"}, cobra.ShellCompDirectiveFilterFileExt
	}
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) > 1:
			return usageErrorf(cmd, "unexpected argument %q", args[1])
		case len(args) == 1 && *cf.file != "":
			return usageErrorf(cmd, "give the file either with -c or as an argument, not both")
		}
		return nil
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 1 {
			*cf.file = args[0]
		}
		cfg, err := cf.load()
		if err != nil {
			printConfigErrors(env.stderr, "check-config", err)
			return &exitCodeError{exitError}
		}
		if *quiet {
			return nil
		}
		out, err := config.MarshalYAML(config.Redacted(cfg))
		if err != nil {
			return err
		}
		_, err = env.stdout.Write(out)
		return err
	}
	return cmd
}
