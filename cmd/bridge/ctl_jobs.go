package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/internal/clock"
)

const jobsHelp = `Bulk jobs over a browse filter: cancel, reschedule, requeue-dead, purge-dead. A job runs
in the bridge in bounded batches; 'jobs start' previews it (how many messages match,
and a sample) and, for cancel and purge-dead, asks before starting (--yes skips the
question); --dry-run only previews; --wait follows the job until it ends.`

func ctlJobs(o *ctlOpts) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "jobs COMMAND",
		Short: "bulk jobs: start (with a dry run first), list, get",
		Long:  jobsHelp,
	})
	cmd.AddCommand(ctlJobsStart(o), ctlJobsList(o), ctlJobsGet(o))
	return cmd
}

// jobKinds are the kinds as typed on the command line (the API's with "-").
func jobKind(s string) (string, bool) {
	k := strings.ReplaceAll(s, "-", "_")
	return k, slices.Contains(admin.JobKinds, k)
}

func cliKinds() []string {
	out := make([]string, len(admin.JobKinds))
	for i, k := range admin.JobKinds {
		out[i] = strings.ReplaceAll(k, "_", "-")
	}
	return out
}

func ctlJobsStart(o *ctlOpts) *cobra.Command {
	cmd := unsorted(&cobra.Command{
		Use:   "start KIND [filter flags] [--at T | --shift D] [--dry-run] [--wait] [--yes]",
		Short: "start a bulk job (KIND: " + strings.Join(cliKinds(), ", ") + ")",
		Args:  exactArgs(1),
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return cliKinds(), cobra.ShellCompDirectiveNoFileComp
		},
	})
	ff := addFilterFlags(o, cmd, "`state`: pending (default) or dead for cancel")
	fs := cmd.Flags()
	at := fs.String("at", "", "reschedule: new due `time` (unix milliseconds or RFC 3339)")
	shift := fs.Duration("shift", 0, "reschedule: move each due time by this `duration` (may be negative)")
	dryRun := fs.Bool("dry-run", false, "only show how many messages match, and a sample")
	sample := fs.Int("sample", admin.DefaultJobSample, fmt.Sprintf("messages in the preview, `N` (0..%d)", admin.MaxJobSample))
	wait := fs.Bool("wait", false, "follow the job until it ends")
	yes := fs.BoolP("yes", "y", false, "do not ask for confirmation")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		kind, ok := jobKind(args[0])
		if !ok {
			return usageErrorf(cmd, "unknown job kind %q: want one of %s", args[0], strings.Join(cliKinds(), ", "))
		}
		f, err := ff.filter(cmd)
		if err != nil {
			return err
		}
		body := admin.JobBody{Kind: kind, Filter: f}
		switch {
		case fs.Changed("at") && fs.Changed("shift"):
			return usageErrorf(cmd, "give --at or --shift, not both")
		case fs.Changed("at"):
			t, err := admin.ParseTime(*at)
			if err != nil {
				return usageErrorf(cmd, "--at: %v", err)
			}
			body.DeliverAt = &admin.Timestamp{Time: t}
		case fs.Changed("shift"):
			body.ShiftMs = ptr(shift.Milliseconds())
		}
		return o.call(func(ctx context.Context, c *admin.Client) error {
			return o.startJob(ctx, cmd, c, body, jobRun{dryRun: *dryRun, wait: *wait, yes: *yes, sample: *sample})
		})
	}
	return cmd
}

type jobRun struct {
	dryRun, wait, yes bool
	sample            int // messages in the preview
}

func (o *ctlOpts) startJob(ctx context.Context, cmd *cobra.Command, c *admin.Client, body admin.JobBody, r jobRun) error {
	destructive := body.Kind == admin.JobCancel || body.Kind == admin.JobPurgeDead
	if r.dryRun || (destructive && !r.yes) {
		preview := body
		preview.Sample = &r.sample
		p, err := c.PreviewJob(ctx, preview)
		if err != nil {
			return err
		}
		if r.dryRun {
			return render(o.env.stdout, o.output, p, func(w *tabwriter.Writer) { previewTable(w, p) })
		}
		previewTable(o.env.stderr, p)
		q := fmt.Sprintf("%s %d message(s) matching %s", strings.ReplaceAll(p.Spec.Kind, "_", " "), p.Matched, describe(p.Spec.Filter))
		if err := o.confirm(cmd, false, q); err != nil {
			return err
		}
	}
	job, err := c.StartJob(ctx, body)
	if err != nil {
		return err
	}
	for r.wait && !jobEnded(job.State) {
		if err := clock.Sleep(ctx, clock.Real{}, jobPoll); err != nil {
			return fmt.Errorf("waiting for job %s (%s, %d of %d done): %w", job.ID, job.State, job.Done, job.Matched, err)
		}
		if job, err = c.GetJob(ctx, job.ID); err != nil {
			return err
		}
	}
	return render(o.env.stdout, o.output, job, func(w *tabwriter.Writer) { jobTable(w, job) })
}

// jobPoll is how often --wait asks for a job's progress.
const jobPoll = 500 * time.Millisecond

func jobEnded(state string) bool {
	return state == admin.JobDone || state == admin.JobFailed || state == admin.JobAbandoned
}

func previewTable(w io.Writer, p admin.JobPreview) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s would touch %d message(s) matching %s\n", p.Spec.Kind, p.Matched, describe(p.Spec.Filter))
	if len(p.Sample) > 0 {
		fmt.Fprintf(tw, "first %d:\n", len(p.Sample))
		messagesTable(tw, admin.MessageList{Messages: p.Sample, Count: len(p.Sample)})
	}
	_ = tw.Flush()
}

func jobTable(w io.Writer, j admin.Job) {
	row(w, "JOB:", j.ID)
	row(w, "KIND:", j.Spec.Kind)
	row(w, "FILTER:", describe(j.Spec.Filter))
	if j.Spec.DeliverAt != 0 {
		row(w, "DELIVER AT:", when(j.Spec.DeliverAt))
	}
	if j.Spec.ShiftMs != 0 {
		row(w, "SHIFT:", (time.Duration(j.Spec.ShiftMs) * time.Millisecond).String())
	}
	row(w, "STATE:", j.State)
	row(w, "PROGRESS:", fmt.Sprintf("%d done, %d failed of %d matched", j.Done, j.Failed, j.Matched))
	row(w, "CREATED:", when(j.CreatedAt))
	row(w, "UPDATED:", when(j.UpdatedAt))
	row(w, "INSTANCE:", dash(j.Instance))
	for i, e := range j.Errors {
		label := ""
		if i == 0 {
			label = "ERRORS:"
		}
		row(w, label, e)
	}
}

func ctlJobsList(o *ctlOpts) *cobra.Command {
	cmd := &cobra.Command{
		Use:               "list [--limit N]",
		Aliases:           []string{"ls"},
		Short:             "recent jobs, newest first",
		Args:              exactArgs(0),
		ValidArgsFunction: noCompletion,
	}
	limit := cmd.Flags().Int("limit", admin.DefaultJobList, fmt.Sprintf("at most `N` jobs (1..%d)", admin.MaxJobList))
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *limit < 1 || *limit > admin.MaxJobList {
			return usageErrorf(cmd, "--limit must be between 1 and %d", admin.MaxJobList)
		}
		return o.call(func(ctx context.Context, c *admin.Client) error {
			jobs, err := c.ListJobs(ctx, *limit)
			if err != nil {
				return err
			}
			return render(o.env.stdout, o.output, admin.JobList{Jobs: jobs}, func(w *tabwriter.Writer) {
				row(w, "JOB", "KIND", "STATE", "MATCHED", "DONE", "FAILED", "CREATED", "FILTER")
				for _, j := range jobs {
					row(w, j.ID, j.Spec.Kind, j.State, j.Matched, j.Done, j.Failed, when(j.CreatedAt), describe(j.Spec.Filter))
				}
			})
		})
	}
	return cmd
}

func ctlJobsGet(o *ctlOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "a job's state and progress",
		Args:  exactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return o.call(func(ctx context.Context, c *admin.Client) error {
				j, err := c.GetJob(ctx, args[0])
				if err != nil {
					return err
				}
				return render(o.env.stdout, o.output, j, func(w *tabwriter.Writer) { jobTable(w, j) })
			})
		},
		ValidArgsFunction: o.completeJobs,
	}
}

// completeJobs offers the ids of recent jobs, with their kind and state.
func (o *ctlOpts) completeJobs(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var ids []string
	o.completeFrom(func(ctx context.Context, c *admin.Client) error {
		jobs, err := c.ListJobs(ctx, admin.DefaultJobList)
		for _, j := range jobs {
			ids = append(ids, j.ID+"\t"+j.Spec.Kind+" "+j.State)
		}
		return err
	})
	return ids, cobra.ShellCompDirectiveNoFileComp
}
