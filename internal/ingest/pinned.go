package ingest

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/wire"
)

// startVersioning checks a start's versioning and build_id (either may be
// nil) and returns what its command carries: the versioning ("" leaves
// it to the workflow's configuration, which the scheduler applies) and
// the build it is pinned to ("" for none, or the build of its first
// workflow task). A build_id implies pinned; it must be one a live worker
// of which registers the workflow on taskQueue, so that the execution
// does not wait for a build that never comes.
func (s *Server) startVersioning(ctx context.Context, name, taskQueue string, versioning, buildID *string) (string, string, *rejection) {
	var v string
	if versioning != nil {
		v = *versioning
		if v != wire.VersioningPinned && v != wire.VersioningAutoUpgrade {
			return "", "", reject(http.StatusBadRequest, api.CodeInvalidVersioning, "versioning",
				fmt.Sprintf("versioning %q: want pinned or auto_upgrade", shownName(v)))
		}
	}
	if buildID == nil {
		return v, "", nil
	}
	build := *buildID
	if v == wire.VersioningAutoUpgrade {
		return "", "", reject(http.StatusBadRequest, api.CodeInvalidBuild, "build_id",
			"build_id pins the execution to a build: it goes with versioning pinned (or none), not auto_upgrade")
	}
	if err := dedup.ValidateBuildID(build); err != nil {
		return "", "", reject(http.StatusBadRequest, api.CodeInvalidBuild, "build_id", "build_id: "+err.Error())
	}
	lctx, cancel := context.WithTimeout(ctx, workerLookupTimeout)
	defer cancel()
	live, err := s.workers.ServesBuild(lctx, name, taskQueue, build, time.Now())
	if err != nil {
		s.log.Warn("look up the workers of a build", "workflow", name, "build_id", build, "err", err)
		return "", "", reject(http.StatusServiceUnavailable, api.CodeUnavailable, "build_id",
			fmt.Sprintf("cannot read the live workers to check build_id %q; try again", build))
	}
	if !live {
		return "", "", reject(http.StatusBadRequest, api.CodeInvalidBuild, "build_id", fmt.Sprintf(
			"build_id %q: no live worker of that build registers workflow %q on task queue %q; "+
				"GET /api/harvest/workers lists the live workers and their builds", build, name, taskQueue))
	}
	return wire.VersioningPinned, build, nil
}

// waitingForPinnedBuild says whether a running execution pinned to a
// build has no live worker of that build to run its workflow tasks: they
// wait, in the task stream, until one starts.
func (s *Server) waitingForPinnedBuild(ctx context.Context, status, name, taskQueue, build string) bool {
	if status != wire.StatusRunning || build == "" {
		return false
	}
	lctx, cancel := context.WithTimeout(ctx, workerLookupTimeout)
	defer cancel()
	live, err := s.workers.ServesBuild(lctx, name, taskQueue, build, time.Now())
	if err != nil {
		s.log.Warn("look up the workers of a build; taking it as live", "workflow", name, "build_id", build, "err", err)
		return false
	}
	return !live
}
