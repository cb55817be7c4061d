package ingest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/schedspec"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// The configuration's schedules (schedules.<id>) are reconciled once
// ingest starts, in the background, until it is done: each is created
// or replaced (a put that changes nothing is answered "unchanged"), and
// a schedule the configuration declared before (source "config") and
// declares no more is deleted. Every ingest of a deployment does it; the
// puts are the same, and the scheduler applies each once. A put's
// message id is derived from the schedule's definition, so that ingests
// starting together send one message for it.

// startReconcile starts the reconciliation, when there is a store to
// reconcile with.
func (s *Server) startReconcile() {
	if !s.hasDB() {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopReconciling = cancel
	s.reconcile.Go(func() {
		// The stack may be starting: its schedulers may not hold the
		// shards yet. Retried until done or stopped.
		_, err := backoff.Retry(ctx, func() (struct{}, error) { return struct{}{}, s.reconcileSchedules(ctx) },
			backoff.WithBackOff(&backoff.ExponentialBackOff{InitialInterval: 500 * time.Millisecond, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: 30 * time.Second}),
			backoff.WithMaxElapsedTime(0))
		if err != nil && ctx.Err() == nil {
			s.log.Error("reconciling the configuration's schedules", "err", err)
		}
	})
}

// stopReconcile ends the reconciliation, and waits for it.
func (s *Server) stopReconcile() {
	if s.stopReconciling != nil {
		s.stopReconciling()
	}
	s.reconcile.Wait()
}

// reconcileSchedules puts every schedule the configuration declares,
// and deletes those it declared before and does not now.
func (s *Server) reconcileSchedules(ctx context.Context) error {
	declared := s.cfg.Schedules
	for _, id := range slices.Sorted(maps.Keys(declared)) {
		req := declared[id]
		req.TaskQueue = cmp.Or(req.TaskQueue, s.configuredQueue(req.Workflow))
		req.Overlap = cmp.Or(req.Overlap, api.OverlapSkip)
		req.CatchupWindow = cmp.Or(req.CatchupWindow, schedspec.DefaultCatchupWindow.String())
		req.WorkflowIDTemplate = cmp.Or(req.WorkflowIDTemplate, schedspec.DefaultWorkflowIDTemplate)
		def, _ := json.Marshal(req)
		msgID := "schedule-config:" + id + ":" + dedup.Fingerprint(def)
		cmd := &wire.Command{CommandID: msgID, Kind: wire.KindSchedule,
			Schedule: &wire.ScheduleCommand{ScheduleID: id, Op: wire.ScheduleOpPut, Definition: &req, Source: wire.ScheduleSourceConfig}}
		out, _, err := s.submit(ctx, s.scheduleShard(id), cmd, msgID)
		if err != nil {
			return fmt.Errorf("schedule %s: %w", id, err)
		}
		if out.Error != "" {
			// Checked when the configuration was loaded: a scheduler of
			// another version may refuse it. Logged, not retried.
			s.log.Error("a schedule of the configuration was refused", "schedule_id", id, "error", out.Error, "message", out.Message)
			continue
		}
		if out.Status != "unchanged" {
			s.log.Info("schedule of the configuration "+out.Status, "schedule_id", id)
		}
	}
	for _, pool := range s.pools() {
		after := ""
		for {
			page, err := store.ListSchedules(ctx, pool, after, 500, nil)
			if err != nil {
				return err
			}
			for _, sc := range page {
				if _, ok := declared[sc.ScheduleID]; ok || sc.Source != wire.ScheduleSourceConfig {
					continue
				}
				cmd := &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindSchedule,
					Schedule: &wire.ScheduleCommand{ScheduleID: sc.ScheduleID, Op: wire.ScheduleOpDelete}}
				if _, _, err := s.submit(ctx, s.scheduleShard(sc.ScheduleID), cmd, cmd.CommandID); err != nil {
					return fmt.Errorf("delete schedule %s: %w", sc.ScheduleID, err)
				}
				s.log.Info("schedule the configuration no longer declares deleted", "schedule_id", sc.ScheduleID)
			}
			if len(page) < 500 {
				break
			}
			after = page[len(page)-1].ScheduleID
		}
	}
	return nil
}
