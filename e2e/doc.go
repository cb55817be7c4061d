// Package e2e holds Harvest's whole-system tests that run the services as
// real processes: the crash test kills the scheduler and the worker with
// SIGKILL while workflows are in flight, and the fault-injection suite
// (TestChaos) runs NATS, PostgreSQL, two ingests, two schedulers and two
// workers as processes, stops any of them with SIGKILL or SIGTERM under
// keyed load, and checks that no acknowledged start is lost, no execution
// or charge is duplicated, and every execution completes.
// TestTheDocsExamplesRun runs the README's and docs/'s shell examples in
// order against a harvest dev process, as a reader would, and compares
// their answers with what the pages say. It has no non-test code.
package e2e
