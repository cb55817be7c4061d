// Command scheduler applies Harvest's commands to PostgreSQL for the shards
// it leases. Run several for availability.
package main

import (
	"os"

	"github.com/harvest-engine/harvest/internal/service"
)

func main() {
	cmd := service.Command("scheduler", "Apply Harvest's commands to PostgreSQL for the shards this process leases", service.RunScheduler, service.FlagAdminAddr, service.FlagDatabaseURL, service.FlagShards)
	os.Exit(service.Exit(cmd, os.Args[1:], os.Stderr))
}
