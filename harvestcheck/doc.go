// Package harvestcheck is a go/analysis analyzer that reports workflow
// code a replay could not repeat.
//
// Workflow code is every function, declared or literal, whose first
// parameter is a *harvest.WorkflowContext (the functions given to
// harvest.RegisterWorkflow and harvest.Go, and methods of that shape).
// Harvest runs it again from its history after a worker restarts, so it
// must take the same path every time. Inside it the analyzer reports:
//
//   - time.Now, Since, Until, Sleep, After, AfterFunc, Tick, NewTimer and
//     NewTicker: use harvest.Now, harvest.Sleep, harvest.NewTimer;
//   - anything from math/rand, math/rand/v2 and crypto/rand: use
//     harvest.SideEffect;
//   - go statements: use harvest.Go;
//   - select statements and sends, receives and ranges on Go channels:
//     use harvest.NewChannel and harvest.NewSelector;
//   - a range over a map whose order can reach a decision: the loop calls
//     into package harvest (directly or through a function that does),
//     returns, breaks out on a condition, or appends to a slice declared
//     outside the loop that is not sorted afterwards;
//   - writes to package-level variables.
//
// It also follows the functions workflow code calls, in every package of
// the program except package harvest (whose SDK is trusted) and the
// standard library (judged only by the names above): a call to a function
// that does one of these things, itself or through what it calls, is
// reported at the call with the chain of calls that leads there. Calls
// through function values and interface methods are not followed.
// Nothing is reported inside a function literal given to
// harvest.SideEffect, nor in activity code (functions whose first
// parameter is a *harvest.ActivityContext).
//
// Run it with
//
//	go run github.com/harvest-engine/harvest/cmd/harvestcheck ./...
//
// or install it and run it as a vet tool:
//
//	go install github.com/harvest-engine/harvest/cmd/harvestcheck
//	go vet -vettool=$(go env GOPATH)/bin/harvestcheck ./...
//
// Both exit non-zero when they report anything.
package harvestcheck
