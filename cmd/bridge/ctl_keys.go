package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/delaybridge/delay-bridge/admin"
)

// ctlKeys is `bridge ctl keys ROUTE KEY` (what is pending for one key of a route with
// order: key, in the key's order) and `bridge ctl keys cancel ROUTE KEY`.
func ctlKeys(o *ctlOpts) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys ROUTE KEY",
		Short: "show what is pending for one ordering key of a route with order: key, in the key's order",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.call(func(ctx context.Context, c *admin.Client) error {
				l, err := c.KeyMessages(ctx, args[0], args[1])
				if err != nil {
					return err
				}
				return render(o.env.stdout, o.output, l, func(w *tabwriter.Writer) { keyTable(w, l) })
			})
		},
		ValidArgsFunction: noCompletion,
	}
	cancel := &cobra.Command{
		Use:               "cancel ROUTE KEY",
		Short:             "cancel what is pending or in flight for one ordering key (asks first)",
		Args:              exactArgs(2),
		ValidArgsFunction: noCompletion,
	}
	yes := cancel.Flags().BoolP("yes", "y", false, "do not ask for confirmation")
	cancel.RunE = func(cmd *cobra.Command, args []string) error {
		return o.call(func(ctx context.Context, c *admin.Client) error {
			question := fmt.Sprintf("cancel what is pending for key %q of route %q", args[1], args[0])
			if !*yes {
				l, err := c.KeyMessages(ctx, args[0], args[1])
				if err != nil {
					return err
				}
				question += fmt.Sprintf(" (%d messages)", len(l.Messages))
			}
			if err := o.confirm(cmd, *yes, question); err != nil {
				return err
			}
			l, err := c.CancelKey(ctx, args[0], args[1])
			if err != nil {
				return err
			}
			return render(o.env.stdout, o.output, l, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "cancelled %d messages of key %s\n", len(l.Messages), l.Key)
				keyTable(w, l)
			})
		})
	}
	cmd.AddCommand(cancel)
	return cmd
}

func keyTable(w *tabwriter.Writer, l admin.KeyList) {
	fmt.Fprintln(w, "ID\tSTATE\tDUE\tATTEMPTS\tHEAD")
	for _, m := range l.Messages {
		head := ""
		if m.ID == l.Head {
			head = "*"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", m.ID, m.State, when(m.DueAt), m.Attempt, head)
	}
}
