package ingest

import (
	"cmp"
	"context"
	"maps"
	"net/http"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/store"
)

// handleWorkflowVersions answers GET /api/harvest/workflows/{name}/versions:
// the workflow's open executions by build and by recorded version, summed
// over the stores.
func (s *Server) handleWorkflowVersions(w http.ResponseWriter, r *http.Request) {
	name, ok := s.pathWorkflow(w, r, "name")
	if !ok || !s.readable(w) {
		return
	}
	per, err := eachStore(r.Context(), s, func(ctx context.Context, _ int, db *pgxpool.Pool) (store.OpenVersions, error) {
		return store.OpenVersionsOf(ctx, db, name)
	})
	if err != nil {
		s.readError(w, "", err)
		return
	}
	writeJSON(w, http.StatusOK, versionsView(name, per))
}

// versionsView sums what the stores counted: builds most first (then by
// id), changes by id, versions by number.
func versionsView(name string, per []store.OpenVersions) api.WorkflowVersionsResponse {
	out := api.WorkflowVersionsResponse{Workflow: name, Builds: []api.BuildCount{}, Changes: []api.ChangeVersions{}}
	builds := map[string]int64{}
	changes := map[string]map[int]int64{}
	for _, v := range per {
		out.Open += v.Open
		for b, n := range v.ByBuild {
			builds[b] += n
		}
		for c, byVersion := range v.ByChange {
			if changes[c] == nil {
				changes[c] = map[int]int64{}
			}
			for version, n := range byVersion {
				changes[c][version] += n
			}
		}
	}
	for b, n := range builds {
		out.Builds = append(out.Builds, api.BuildCount{BuildID: b, Open: n})
	}
	slices.SortFunc(out.Builds, func(a, b api.BuildCount) int {
		return cmp.Or(cmp.Compare(b.Open, a.Open), cmp.Compare(a.BuildID, b.BuildID))
	})
	for _, c := range slices.Sorted(maps.Keys(changes)) {
		cv := api.ChangeVersions{ChangeID: c, Versions: []api.VersionCount{}, Unrecorded: out.Open}
		for _, version := range slices.Sorted(maps.Keys(changes[c])) {
			n := changes[c][version]
			cv.Versions = append(cv.Versions, api.VersionCount{Version: version, Open: n})
			cv.Unrecorded -= n
		}
		out.Changes = append(out.Changes, cv)
	}
	return out
}
