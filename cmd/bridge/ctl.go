package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/config"
)

func init() { addCommand(newCtlCmd) }

const ctlHelp = `Talk to a running bridge through its admin API.

Results are tables by default; -o json prints the API's JSON answer as it is, -o yaml
the same as YAML. Times are shown in local time (RFC 3339) with how far away they are
("in 3m12s", "5s ago"). D is a Go duration (5s, 1h30m); T is unix milliseconds or
RFC 3339. cancel, purge-dead and the cancel and purge-dead jobs ask for confirmation;
--yes skips it (required when standard input is not a terminal). ls browses messages by
due time with filters; jobs runs bulk operations over the same filters.

The address and token default to the bridge's own settings: from the file given with
-c, else from DELAYBRIDGE_ADMIN__LISTEN and DELAYBRIDGE_ADMIN__TOKEN, else
http://127.0.0.1:8089 without a token.`

// ctlOpts are the flags every ctl command takes.
type ctlOpts struct {
	env     *cliEnv
	addr    string
	token   string
	file    string
	timeout time.Duration
	output  string
}

func newCtlCmd(env *cliEnv) *cobra.Command {
	o := &ctlOpts{env: env}
	cmd := unsorted(group(&cobra.Command{
		Use:   "ctl COMMAND [ARGS] [--addr URL] [--token T] [-c FILE] [-o table|json|yaml]",
		Short: "talk to a running bridge through its admin API",
		Long:  ctlHelp,
	}))
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.addr, "addr", "", "admin API base `URL` (default from the configuration, else http://127.0.0.1:8089)")
	pf.StringVar(&o.token, "token", "", "bearer `token` (default from the configuration)")
	pf.StringVarP(&o.file, "config", "c", "", "read admin.listen and admin.token from this configuration `file`")
	pf.DurationVar(&o.timeout, "timeout", 30*time.Second, "give up after this `duration`")
	pf.StringVarP(&o.output, "output", "o", "table", "output `format`: table, json or yaml")
	_ = cmd.MarkPersistentFlagFilename("config", "yaml", "yml")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
	cmd.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if !isOutputFormat(o.output) {
			return usageErrorf(cmd, "-o %q: want one of %s", o.output, strings.Join(outputFormats, ", "))
		}
		return nil
	}
	for _, build := range ctlCommands {
		cmd.AddCommand(build(o))
	}
	return cmd
}

// client returns the admin API client for the target of the flags.
func (o *ctlOpts) client() (*admin.Client, error) {
	base, tok, err := ctlTarget(o.file, o.addr, o.token)
	if err != nil {
		return nil, err
	}
	return admin.NewClient(base, tok, nil), nil
}

// call runs fn with a client and a context bounded by --timeout; errors are explained
// (see explain).
func (o *ctlOpts) call(fn func(ctx context.Context, c *admin.Client) error) error {
	c, err := o.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	return explain(fn(ctx, c), o)
}

// explain adds what to do next to the errors people meet most.
func explain(err error, o *ctlOpts) error {
	var ne *net.OpError
	var ue *usageError
	switch {
	case err == nil || errors.As(err, &ue):
		return err
	case errors.Is(err, admin.ErrUnauthorized):
		return fmt.Errorf("%w (give the admin token with --token, or -c with the bridge's configuration)", err)
	case errors.As(err, &ne) && ne.Op == "dial":
		return fmt.Errorf("%w (is the bridge running, and is --addr its admin.listen?)", err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w (no answer within --timeout %v)", err, o.timeout)
	}
	return err
}

// confirm asks on the terminal before a destructive action; --yes skips the question.
// Without a terminal and without --yes it refuses (a usage error: exit 2).
func (o *ctlOpts) confirm(cmd *cobra.Command, yes bool, question string) error {
	if yes {
		return nil
	}
	if !o.env.terminal() {
		return usageErrorf(cmd, "refusing to %s without confirmation: standard input is not a terminal; add --yes", question)
	}
	fmt.Fprintf(o.env.stderr, "%s? [y/N] ", upperFirst(question))
	line, err := bufio.NewReader(o.env.stdin).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(o.env.stderr, "\nno answer; nothing changed")
		return &exitCodeError{exitError}
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	fmt.Fprintln(o.env.stderr, "not confirmed; nothing changed")
	return &exitCodeError{exitError}
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// ctlTarget works out the API address and token: flags, else the configuration file,
// else the DELAYBRIDGE_ADMIN__* environment, else the defaults.
func ctlTarget(file, addr, token string) (string, string, error) {
	listen, tok := config.Default().Admin.Listen, ""
	if file != "" {
		cfg, err := config.Load(config.LoadOptions{File: file, Env: environ()})
		if err != nil && cfg.Admin.Listen == "" && cfg.Cluster == "" {
			return "", "", fmt.Errorf("reading %s: %w", file, err)
		}
		listen, tok = cfg.Admin.Listen, cfg.Admin.Token
	} else {
		for _, kv := range environ() {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case config.EnvPrefix + "ADMIN__LISTEN":
				listen = v
			case config.EnvPrefix + "ADMIN__TOKEN":
				tok = v
			}
		}
	}
	if token != "" {
		tok = token
	}
	if addr != "" {
		return addr, tok, nil
	}
	if listen == "" {
		return "", "", errors.New("the admin API is disabled (admin.listen is empty); give --addr")
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", "", fmt.Errorf("admin.listen %q: %w", listen, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), tok, nil
}
