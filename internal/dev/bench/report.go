package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable writes res as a table for a person.
func WriteTable(w io.Writer, res *Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(name string, value any, note ...string) {
		fmt.Fprintf(tw, "  %s\t%v\t%s\n", name, value, strings.Join(note, " "))
	}
	opt := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return num(*v)
	}
	if res.Rate != nil {
		fmt.Fprintf(tw, "harvest bench %s: %s, n=%d, open loop at %s starts/s\n", res.Workload, res.Target, res.N, num(*res.Rate))
	} else {
		fmt.Fprintf(tw, "harvest bench %s: %s, n=%d, concurrency=%d\n", res.Workload, res.Target, res.N, res.Concurrency)
	}
	row("submissions", res.Submissions)
	if res.Rate != nil {
		row("send_lag_p99_ms", opt(res.SendLagP99Ms), "(how late the starts left after they were due)")
		row("max_in_flight", res.MaxInFlightSeen, "(requests waiting for their answers at once)")
	}
	row("submits_per_s", num(res.SubmitsPerS))
	row("completions_per_s", num(res.CompletionsPerS), "(first submit to last completion)")
	row("start_p50_ms", num(res.StartP50Ms), cond(res.Rate != nil, "(open loop: from when each start was due)", ""))
	row("start_p99_ms", num(res.StartP99Ms))
	if res.SignalP50Ms != nil {
		row("signal_p50_ms", opt(res.SignalP50Ms))
		row("signal_p99_ms", opt(res.SignalP99Ms))
	}
	row("e2e_p50_ms", num(res.E2EP50Ms), "(first submit of a key to its execution's closed_at)")
	row("e2e_p99_ms", num(res.E2EP99Ms))
	row("distinct_executions", res.DistinctExecutions)
	row("completed", res.Completed)
	row("activity_runs", res.ActivityRuns, "(from "+res.ActivityRunsSource+")")
	row("duplicates_detected", res.DuplicatesDetected)
	row("errors", res.Errors)
	row("duration_s", num(res.DurationS))
	remote := res.CPUS == nil
	why := ""
	if remote {
		why = "(not measured against --addr)"
	}
	row("cpu_s", opt(res.CPUS), cond(remote, why, "(this process: stack and bench client)"))
	row("peak_rss_mb", opt(res.PeakRSSMB), cond(remote, why, "(this process)"))
	row("postgres_cpu_s", opt(res.PostgresCPUS), cond(res.PostgresCPUS == nil, "(not measured: no private PostgreSQL)", "(private PostgreSQL)"))
	fmt.Fprintf(tw, "cost per workflow\t\t\n")
	row("sql_statements_per_workflow", opt(res.SQLStatementsPerWorkflow), why)
	row("transactions_per_workflow", opt(res.TransactionsPerWorkflow), why)
	var split []string
	for _, name := range slices.Sorted(maps.Keys(res.JetStreamMessagesPerStream)) {
		split = append(split, name+" "+num(res.JetStreamMessagesPerStream[name]))
	}
	note := why
	if len(split) > 0 {
		note = "(" + strings.Join(split, ", ") + ")"
	}
	row("jetstream_messages_per_workflow", opt(res.JetStreamMessagesPerWorkflow), note)
	if len(res.TableSizes) > 0 {
		fmt.Fprintf(tw, "tables over the run (rows; MB of all tables, indexes included)\t\t\n")
		for _, smp := range res.TableSizes {
			var bytes int64
			for _, t := range smp.Tables {
				bytes += t.Bytes
			}
			row(fmt.Sprintf("at %ss", num(smp.AtS)), fmt.Sprintf("executions %d, history_events %d, activities %d",
				smp.Tables["executions"].Rows, smp.Tables["history_events"].Rows, smp.Tables["activities"].Rows),
				fmt.Sprintf("%.1f MB", float64(bytes)/(1<<20)))
		}
	}
	fmt.Fprintf(tw, "checks\t\t\n")
	for _, c := range res.Checks {
		row(c.Name, fmt.Sprintf("%d", c.Got), fmt.Sprintf("want %d", c.Want), cond(c.OK, "ok", "FAILED"))
	}
	for _, e := range res.ErrorSamples {
		fmt.Fprintf(tw, "  error: %s\t\t\n", e)
	}
	fmt.Fprintf(tw, "result\t%s\t\n", cond(res.OK, "OK", "FAILED"))
	return tw.Flush()
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func cond(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}
