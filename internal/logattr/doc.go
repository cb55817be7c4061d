// Package logattr names the log attributes that tie a line to one
// execution, the same in every process (ingest, the bindings, the
// scheduler, the workers), so that grep of one execution id, or jq on JSON
// logs, finds the execution's whole story:
//
//	execution_id  the execution the line is about
//	workflow      its workflow's name
//	command_id    the command in hand: the one ingest publishes, the
//	              scheduler applies, or a worker reports a task's result in
//	activity      an activity's name
//	activity_id   its id in the execution
//	attempt       the attempt's number
//
// Other spellings (exec, execution, workflow_name, wf, run_id) are not
// used; a test of this package fails if one comes back.
package logattr
