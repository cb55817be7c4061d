package store

import (
	"context"
	"fmt"
)

// ClosedExecutions returns those of the given executions that have
// closed, with their status, result and closed_at. `harvest bench` polls
// it with the executions it still waits for, so each poll reads only
// those, by primary key.
func ClosedExecutions(ctx context.Context, db DBTX, executionIDs []string) ([]*Execution, error) {
	if len(executionIDs) == 0 {
		return nil, nil
	}
	rows, err := db.Query(ctx, `SELECT `+executionColumns+` FROM executions
		WHERE execution_id = ANY($1::uuid[]) AND status <> 'Running'`, executionIDs)
	if err != nil {
		return nil, fmt.Errorf("read closed executions: %w", err)
	}
	defer rows.Close()
	var out []*Execution
	for rows.Next() {
		e, err := scanExecution(rows)
		if err != nil {
			return nil, fmt.Errorf("read closed executions: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read closed executions: %w", err)
	}
	return out, nil
}
