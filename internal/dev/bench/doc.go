// Package bench measures Harvest under load: the workloads of
// `harvest bench`, run over the HTTP API against a running stack or a
// stack in this process ([Local]), each verified as it is measured.
//
//   - W1: N keyed starts of bench_echo (one activity that returns its
//     input), from Concurrency submitters.
//   - W2: W1 plus 30% extra submissions that reuse an earlier key shortly
//     after it, racing the original; it checks that there are exactly N
//     executions and N activity runs.
//   - W3: N collect executions, each sent 10 keyed item signals of which 3
//     are sent twice; it checks that each completes with exactly its 10
//     distinct items.
//
// With Config.Rate, W1 and W2 are open-loop, the way webhooks arrive:
// the starts leave Rate a second on a fixed schedule whatever the answers
// do, and each latency runs from when its start was due. FindRate
// searches for the highest such rate whose e2e p99 holds a bound.
//
// Latencies are exact percentiles over every sample. An execution's
// end-to-end time runs from the first submission of its key to its
// closed_at as the database records it, so how often the bench polls for
// completions does not change it. With a [Local] stack the bench also
// measures the cost per workflow: SQL statements and transactions (a pgx
// tracer on the stack's pool), JetStream messages stored (stream sequence
// deltas), and the CPU time and peak memory of the process and of the
// private PostgreSQL.
//
// It drives a stack from the outside, through the HTTP API and the
// client; it reads PostgreSQL only to verify and to count, and the
// services must never import it.
package bench

// Where things are:
//
//   - bench.go: the workloads, Config, Result, Run. workloads.go: how each
//     workload's starts and signals are planned and sent (add a workload
//     there). runner.go: one run, and its requests to the API.
//     openloop.go: sending starts on a schedule (Config.Rate). rate.go:
//     FindRate, the search for the highest rate that holds.
//   - track.go: following the run's executions until each has closed,
//     through the stack's databases or the API. verify.go: the figures
//     (percentiles) and each workload's checks.
//   - local.go: Local, a stack in this process, whose cost the bench can
//     measure. cost.go: what is measured: SQL statements and transactions
//     (SQLCounter), messages stored, CPU time and memory. storage.go: the
//     tables' sizes during a run, and a seeded backlog of old executions.
//   - report.go: a Result as a table for a person.
