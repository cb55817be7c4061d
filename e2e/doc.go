// Package e2e holds Harvest's whole-system tests that run the services as
// real processes: the crash test kills the scheduler and the worker with
// SIGKILL while workflows are in flight. It has no non-test code.
package e2e
