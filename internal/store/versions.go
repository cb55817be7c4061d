package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// OpenVersions are the open (Running) executions of one workflow, by the
// build that completed their last workflow task and by the version each
// recorded of each change (harvest.GetVersion): what an operator reads
// before retiring a build or a branch.
type OpenVersions struct {
	Open int64
	// ByBuild counts them by build id; "" for those that completed no
	// workflow task yet, or only on workers that recorded no build.
	ByBuild map[string]int64
	// ByChange counts, for each change id any of them recorded, those
	// that recorded each version.
	ByChange map[string]map[int]int64
}

// OpenVersionsOf reads the open executions of workflow, in three
// statements. Each reads the executions' rows by status
// (executions_status_idx) and, for each, its history by its primary key:
// an operator's read, not one a request path makes.
func OpenVersionsOf(ctx context.Context, db DBTX, workflow string) (OpenVersions, error) {
	out := OpenVersions{ByBuild: map[string]int64{}, ByChange: map[string]map[int]int64{}}
	if err := db.QueryRow(ctx, `SELECT count(*) FROM executions WHERE status = 'Running' AND workflow_name = $1`, workflow).Scan(&out.Open); err != nil {
		return out, fmt.Errorf("count open executions of %s: %w", workflow, err)
	}
	type byBuild struct {
		Build string
		N     int64
	}
	builds, err := queryRows(ctx, db, pgx.RowToStructByPos[byBuild], `SELECT coalesce(b.build_id, ''), count(*) FROM executions e
		LEFT JOIN LATERAL (SELECT h.attrs->>'build_id' AS build_id FROM history_events h
			WHERE h.execution_id = e.execution_id AND h.type = 'WorkflowTaskCompleted' ORDER BY h.seq DESC LIMIT 1) b ON true
		WHERE e.status = 'Running' AND e.workflow_name = $1 GROUP BY 1`, workflow)
	if err != nil {
		return out, fmt.Errorf("open executions of %s by build: %w", workflow, err)
	}
	for _, b := range builds {
		out.ByBuild[b.Build] = b.N
	}
	type byVersion struct {
		Change  string
		Version int
		N       int64
	}
	versions, err := queryRows(ctx, db, pgx.RowToStructByPos[byVersion], `SELECT h.attrs->>'change_id', (h.attrs->>'version')::int, count(DISTINCT e.execution_id)
		FROM executions e JOIN history_events h ON h.execution_id = e.execution_id AND h.type = 'VersionMarker'
		WHERE e.status = 'Running' AND e.workflow_name = $1 GROUP BY 1, 2`, workflow)
	if err != nil {
		return out, fmt.Errorf("open executions of %s by version: %w", workflow, err)
	}
	for _, v := range versions {
		if out.ByChange[v.Change] == nil {
			out.ByChange[v.Change] = map[int]int64{}
		}
		out.ByChange[v.Change][v.Version] = v.N
	}
	return out, nil
}
