package main

// main.go holds the command's documentation; this file maps its files.

// Where things are:
//
//   - main.go: main and the root command; add a subcommand there, in a
//     file of its own named for it.
//   - Running a stack: dev.go (harvest dev), devconfig.go (the
//     one-process stack the configuration describes, for dev and bench),
//     migrate.go, bench.go (harvest bench, and the stack it starts),
//     fakepay.go (the examples' fake payment provider).
//   - Talking to the HTTP API: workflow.go (start, signal, describe,
//     history, list, cancel, terminate, versions, and the client and
//     output they share), histories.go (harvest workflow histories
//     export), commands.go, executions.go (counts, prune), worker.go
//     (harvest worker and harvest task-queue), admission.go (and the API
//     flags every client subcommand takes), stores.go (drain),
//     schedule.go (harvest schedule: schedules and their ledgers),
//     reset.go (harvest workflow reset), batch.go (harvest batch: batch
//     operations).
//     unreachable.go: what to do when no API answers.
//   - token.go: new tokens and their hashes. version.go: the build.
