package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/delaybridge/delay-bridge/admin"
)

const schedulesHelp = `Recurring schedules: each slot publishes one message (id <schedule>@<slot unix ms>) into
a route's target. SPEC is a cron expression (5 fields, or 6 with seconds first;
"CRON_TZ=Europe/Berlin 0 2 * * *" for a time zone, UTC otherwise), "@every 10m", or
"@at 2030-01-01T00:00:00Z,2030-06-01T00:00:00Z". Schedules from the config file
(schedules:) are read-only here.`

func ctlSchedules(o *ctlOpts) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "schedules COMMAND",
		Short: "recurring schedules: list, get, create, edit, pause, resume, delete",
		Long:  schedulesHelp,
	})
	cmd.AddCommand(ctlSchedulesList(o), ctlSchedulesGet(o), ctlSchedulesPut(o, true), ctlSchedulesPut(o, false),
		ctlSchedulesPause(o, true), ctlSchedulesPause(o, false), ctlSchedulesDelete(o))
	return cmd
}

func ctlSchedulesList(o *ctlOpts) *cobra.Command {
	return &cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Short: "every schedule with its next slot",
		Args: exactArgs(0), ValidArgsFunction: noCompletion,
		RunE: func(*cobra.Command, []string) error {
			return o.call(func(ctx context.Context, c *admin.Client) error {
				list, err := c.ListSchedules(ctx)
				if err != nil {
					return err
				}
				return render(o.env.stdout, o.output, admin.ScheduleList{Schedules: list}, func(w *tabwriter.Writer) {
					row(w, "ID", "ROUTE", "SPEC", "STATE", "ORIGIN", "NEXT")
					for _, s := range list {
						next := "-"
						if len(s.Next) > 0 {
							next = when(s.Next[0].Due)
						}
						row(w, s.ID, s.Route, s.Spec, s.State, s.Origin, next)
					}
				})
			})
		},
	}
}

func scheduleTable(w *tabwriter.Writer, s admin.ScheduleInfo) {
	row(w, "SCHEDULE:", s.ID)
	row(w, "ROUTE:", s.Route)
	if s.Target != "" {
		row(w, "TARGET:", s.Target)
	}
	row(w, "SPEC:", s.Spec)
	row(w, "STATE:", s.State)
	row(w, "ORIGIN:", s.Origin)
	row(w, "CATCH UP:", s.CatchUp)
	if s.JitterMs > 0 {
		row(w, "JITTER:", (time.Duration(s.JitterMs) * time.Millisecond).String())
	}
	row(w, "GENERATION:", s.Generation)
	row(w, "UPDATED:", when(s.UpdatedAt))
	for i, n := range s.Next {
		label := ""
		if i == 0 {
			label = "NEXT:"
		}
		row(w, label, when(n.Due)+"  "+n.ID)
	}
	for i, l := range s.Last {
		label := ""
		if i == 0 {
			label = "LAST:"
		}
		row(w, label, when(l.Slot.Slot)+"  "+l.Outcome+"  "+dash(l.State))
	}
}

func ctlSchedulesGet(o *ctlOpts) *cobra.Command {
	return &cobra.Command{
		Use: "get ID", Short: "a schedule with its next 5 slots and its last outcomes",
		Args: exactArgs(1), ValidArgsFunction: o.completeSchedules,
		RunE: func(_ *cobra.Command, args []string) error {
			return o.call(func(ctx context.Context, c *admin.Client) error {
				s, err := c.GetSchedule(ctx, args[0])
				if err != nil {
					return err
				}
				return render(o.env.stdout, o.output, s, func(w *tabwriter.Writer) { scheduleTable(w, s) })
			})
		},
	}
}

// ctlSchedulesPut is "create" (create) or "edit": both take the whole definition.
func ctlSchedulesPut(o *ctlOpts, create bool) *cobra.Command {
	use, short := "create ID --route R --spec SPEC [flags]", "create a schedule"
	if !create {
		use, short = "edit ID --route R --spec SPEC [flags]", "replace a schedule's definition (its future slots are replaced)"
	}
	cmd := unsorted(&cobra.Command{Use: use, Short: short, Args: exactArgs(1)})
	if create {
		cmd.ValidArgsFunction = noCompletion
	} else {
		cmd.ValidArgsFunction = o.completeSchedules
	}
	fs := cmd.Flags()
	var def admin.ScheduleDef
	fs.StringVar(&def.Route, "route", "", "the `route` whose target receives the messages (required)")
	fs.StringVar(&def.Spec, "spec", "", "cron expression, @every <duration> or @at <times> (required)")
	fs.StringVar(&def.Payload, "payload", "", "message `text`")
	headers := fs.StringArray("header", nil, "message header `name=value` (repeatable)")
	fs.StringVar(&def.Key, "key", "", "Kafka `key`")
	fs.StringVar(&def.RoutingKey, "routing-key", "", "AMQP routing `key`")
	fs.StringVar(&def.Target, "target", "", "a `target` on the route's allow_targets")
	fs.StringVar(&def.Start, "start", "", "no slot before this `time` (RFC 3339)")
	fs.StringVar(&def.End, "end", "", "no slot after this `time` (RFC 3339)")
	jitter := fs.Duration("jitter", 0, "delay each slot by up to this `duration` (the same on every instance)")
	fs.StringVar(&def.CatchUp, "catch-up", "", "slots missed while no bridge ran: skip (default), one or all")
	fs.IntVar(&def.CatchUpLimit, "catch-up-limit", 0, "catch-up all: at most `N` slots (default 100)")
	_ = cmd.RegisterFlagCompletionFunc("catch-up", cobra.FixedCompletions([]string{"skip", "one", "all"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if def.Route == "" || def.Spec == "" {
			return usageErrorf(cmd, "--route and --spec are required")
		}
		for _, h := range *headers {
			k, v, ok := strings.Cut(h, "=")
			if !ok || k == "" {
				return usageErrorf(cmd, "--header %q: want name=value", h)
			}
			if def.Headers == nil {
				def.Headers = map[string]string{}
			}
			def.Headers[k] = v
		}
		def.ID, def.JitterMs = args[0], jitter.Milliseconds()
		return o.call(func(ctx context.Context, c *admin.Client) error {
			var s admin.ScheduleInfo
			var err error
			if create {
				s, err = c.CreateSchedule(ctx, def)
			} else {
				s, err = c.UpdateSchedule(ctx, def)
			}
			if err != nil {
				return err
			}
			return render(o.env.stdout, o.output, s, func(w *tabwriter.Writer) { scheduleTable(w, s) })
		})
	}
	return cmd
}

func ctlSchedulesPause(o *ctlOpts, pause bool) *cobra.Command {
	use, short := "pause ID", "pause a schedule (its parked future slots are cancelled)"
	if !pause {
		use, short = "resume ID", "resume a paused schedule (from now on; paused slots are not caught up)"
	}
	return &cobra.Command{
		Use: use, Short: short, Args: exactArgs(1), ValidArgsFunction: o.completeSchedules,
		RunE: func(_ *cobra.Command, args []string) error {
			return o.call(func(ctx context.Context, c *admin.Client) error {
				s, err := c.PauseSchedule(ctx, args[0], pause)
				if err != nil {
					return err
				}
				return render(o.env.stdout, o.output, s, func(w *tabwriter.Writer) { scheduleTable(w, s) })
			})
		},
	}
}

func ctlSchedulesDelete(o *ctlOpts) *cobra.Command {
	return &cobra.Command{
		Use: "delete ID", Aliases: []string{"rm"}, Short: "delete a schedule (its parked future slots are cancelled)",
		Args: exactArgs(1), ValidArgsFunction: o.completeSchedules,
		RunE: func(_ *cobra.Command, args []string) error {
			return o.call(func(ctx context.Context, c *admin.Client) error {
				if err := c.DeleteSchedule(ctx, args[0]); err != nil {
					return err
				}
				_, err := fmt.Fprintf(o.env.stdout, "deleted schedule %s\n", args[0])
				return err
			})
		},
	}
}

// completeSchedules offers the schedules' ids with their spec.
func (o *ctlOpts) completeSchedules(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var ids []string
	o.completeFrom(func(ctx context.Context, c *admin.Client) error {
		list, err := c.ListSchedules(ctx)
		for _, s := range list {
			ids = append(ids, s.ID+"\t"+s.Spec)
		}
		return err
	})
	return ids, cobra.ShellCompDirectiveNoFileComp
}
