// Command harvestcheck reports workflow code that a replay could not
// repeat: the analyzer of package harvestcheck, as a standalone command
// and as a vet tool. It exits non-zero when it reports anything.
//
//	go run github.com/harvest-engine/harvest/cmd/harvestcheck ./...
//	go vet -vettool=$(go env GOPATH)/bin/harvestcheck ./...
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/harvest-engine/harvest/harvestcheck"
)

func main() { singlechecker.Main(harvestcheck.Analyzer) }
