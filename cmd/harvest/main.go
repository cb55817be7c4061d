// Command harvest is Harvest's command line: `harvest dev` runs the whole
// stack in one process, `harvest migrate` applies the schema, `harvest
// workflow`, `harvest schedule`, `harvest batch`, `harvest commands`, `harvest executions`,
// `harvest worker`, `harvest task-queue` and `harvest admission` talk to
// the HTTP API, `harvest bench` measures.
package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest/internal/service"
)

func main() {
	os.Exit(service.Exit(newRoot(), os.Args[1:], os.Stderr))
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "harvest",
		Short:         "Harvest: durable workflows for webhook- and event-driven work",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newDev(), newMigrate(), newAdmission(), newWorkflow(), newSchedule(), newBatch(), newCommands(), newExecutions(), newWorker(), newTaskQueue(), newBench(), newFakepay(), newToken(), newStores(), newVersion())
	return root
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
