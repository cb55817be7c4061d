package workerrt_test

import (
	"testing"

	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// contractTests are the tests of this package that hold the contract of
// the start, signal and activity paths: TestTheContractHoldsOnTwoStores
// runs them again on stacks of two stores.
var contractTests = []string{
	"TestActivityRetries", "TestHeartbeatsAndReconcile", "TestScheduleToCloseBoundsAllAttempts", "TestCancellingAWorkflowCancelsItsActivities",
	"TestOnceRunsAnEffectOncePerKey", "TestEveryInvocationGetsItsOwnKey", "TestChildWorkflowsInALiveStack",
}

// TestTheContractHoldsOnTwoStores runs the contract tests again, in a
// process of their own (this test binary, run again), on stacks whose
// executions are spread over two stores.
func TestTheContractHoldsOnTwoStores(t *testing.T) { stacktest.RunOnStores(t, 2, contractTests) }
