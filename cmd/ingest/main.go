// Command ingest serves Harvest's HTTP API: it publishes start commands to
// JetStream and answers with their outcome, and reads executions and their
// history from PostgreSQL (which it never writes). It also runs the NATS
// subject bindings, which turn messages of the users' streams into
// commands.
package main

import (
	"os"

	"github.com/harvest-engine/harvest/internal/service"
)

func main() {
	cmd := service.Command("ingest", "Serve Harvest's HTTP API and run the NATS subject bindings", service.RunIngest, service.FlagAddr, service.FlagDatabaseURL, service.FlagShards)
	os.Exit(service.Exit(cmd, os.Args[1:], os.Stderr))
}
