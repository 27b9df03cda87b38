package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/delaybridge/delay-bridge/admin"
)

// filterFlags are the browse filters (GET /v1/messages, POST /v1/jobs "filter").
type filterFlags struct {
	route, state, dueFrom, dueTo, idPrefix, keyPrefix *string
}

func addFilterFlags(o *ctlOpts, cmd *cobra.Command, stateHelp string) filterFlags {
	fs := cmd.Flags()
	f := filterFlags{
		route:     fs.String("route", "", "only this route `name`"),
		state:     fs.String("state", "", stateHelp),
		dueFrom:   fs.String("due-from", "", "due at or after this `time` (unix milliseconds or RFC 3339)"),
		dueTo:     fs.String("due-to", "", "due before this `time` (unix milliseconds or RFC 3339)"),
		idPrefix:  fs.String("id-prefix", "", "ids starting with this `text`"),
		keyPrefix: fs.String("key-prefix", "", "Kafka keys starting with this `text`"),
	}
	_ = cmd.RegisterFlagCompletionFunc("route", o.completeRoutes)
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(
		[]string{admin.StatePending, admin.StateInflight, admin.StateDead}, cobra.ShellCompDirectiveNoFileComp))
	return f
}

func (f filterFlags) filter(cmd *cobra.Command) (admin.Filter, error) {
	out := admin.Filter{Route: *f.route, State: *f.state, IDPrefix: *f.idPrefix, KeyPrefix: *f.keyPrefix}
	for _, t := range []struct {
		flag string
		text string
		to   *int64
	}{{"--due-from", *f.dueFrom, &out.DueFrom}, {"--due-to", *f.dueTo, &out.DueTo}} {
		if t.text == "" {
			continue
		}
		at, err := admin.ParseTime(t.text)
		if err != nil {
			return admin.Filter{}, usageErrorf(cmd, "%s: %v", t.flag, err)
		}
		*t.to = at.UnixMilli()
	}
	return out, nil
}

// describe shows a filter in words for a question: `route=orders state=pending`.
func describe(f admin.Filter) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	add("route", f.Route)
	add("state", f.State)
	if f.DueFrom != 0 {
		add("due-from", when(f.DueFrom))
	}
	if f.DueTo != 0 {
		add("due-to", when(f.DueTo))
	}
	add("id-prefix", f.IDPrefix)
	add("key-prefix", f.KeyPrefix)
	if len(parts) == 0 {
		return "(no filter)"
	}
	return strings.Join(parts, " ")
}

const lsHelp = `List pending (default), in-flight or dead messages, ordered by due time, a page at a
time: the footer gives the --cursor of the next page; --all reads every page.`

func ctlLs(o *ctlOpts) *cobra.Command {
	cmd := unsorted(&cobra.Command{
		Use:     "ls [--route R] [--state S] [--due-from T] [--due-to T] [--id-prefix P] [--key-prefix P]",
		Aliases: []string{"list", "browse"},
		Short:   "list messages by due time, with filters and paging",
		Long:    lsHelp,
		Args:    exactArgs(0),
	})
	ff := addFilterFlags(o, cmd, "`state`: pending (default), inflight or dead")
	limit := cmd.Flags().Int("limit", admin.DefaultBrowseLimit, fmt.Sprintf("messages per page, `N` (1..%d)", admin.MaxBrowseLimit))
	cursor := cmd.Flags().String("cursor", "", "continue from this `cursor` (printed after a page)")
	all := cmd.Flags().Bool("all", false, "read every page")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		f, err := ff.filter(cmd)
		if err != nil {
			return err
		}
		if *limit < 1 || *limit > admin.MaxBrowseLimit {
			return usageErrorf(cmd, "--limit must be between 1 and %d", admin.MaxBrowseLimit)
		}
		return o.call(func(ctx context.Context, c *admin.Client) error {
			l, err := browseAll(ctx, c, admin.Query{Filter: f, Limit: *limit, Cursor: *cursor}, *all)
			if err != nil {
				return err
			}
			return render(o.env.stdout, o.output, l, func(w *tabwriter.Writer) { messagesTable(w, l) })
		})
	}
	return cmd
}

// browseAll reads one page, or with all every page, into one list.
func browseAll(ctx context.Context, c *admin.Client, q admin.Query, all bool) (admin.MessageList, error) {
	var out admin.MessageList
	for {
		page, err := c.Browse(ctx, q)
		if err != nil {
			return out, err
		}
		out.Messages = append(out.Messages, page.Messages...)
		out.Count += page.Count
		out.NextCursor = page.NextCursor
		if !all || page.NextCursor == "" {
			return out, nil
		}
		q.Cursor = page.NextCursor
	}
}

func messagesTable(w io.Writer, l admin.MessageList) {
	row(w, "ID", "STATE", "ROUTE", "DUE", "ATTEMPTS", "PAYLOAD")
	for _, m := range l.Messages {
		row(w, m.ID, m.State, dash(m.Route), when(m.DueAt), m.Attempt, fmt.Sprintf("%d B", m.PayloadSize))
	}
	fmt.Fprintf(w, "\n%d message(s)", l.Count)
	if l.NextCursor != "" {
		fmt.Fprintf(w, "; more with --cursor %s", l.NextCursor)
	}
	fmt.Fprintln(w)
}
