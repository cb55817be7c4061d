package ingest

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/store"
)

// handleListDead answers GET /api/harvest/commands/dead: the commands the
// scheduler set aside, newest first (?shard=, ?before=<id>, ?limit=).
func (s *Server) handleListDead(w http.ResponseWriter, r *http.Request) {
	if !s.readable(w) {
		return
	}
	q := queryOf(r)
	f := store.DeadFilter{Limit: 50}
	if v := q.Get("shard"); v != "" {
		n, err := strconv.Atoi(v)
		if total := s.cfg.Topology.Layout().TotalShards(); err != nil || n < 0 || n >= total {
			writeFieldError(w, http.StatusBadRequest, api.CodeInvalidShard, "shard", fmt.Sprintf("shard must be 0 to %d", total-1))
			return
		}
		f.Shard = &n
	}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			writeFieldError(w, http.StatusBadRequest, api.CodeInvalidBefore, "before", "before must be a dead command id")
			return
		}
		f.Before = n
	}
	var ok bool
	if f.Limit, ok = queryLimit(w, q, f.Limit); !ok {
		return
	}
	if limited(r.Context()) {
		// A dead command's payload may name any workflow, or none: a
		// token limited to some workflows sees none of them.
		writeJSON(w, http.StatusOK, api.ListDeadCommandsResponse{DeadCommands: []api.DeadCommand{}})
		return
	}
	dead, err := s.listDead(r.Context(), f)
	if err != nil {
		s.readError(w, "", err)
		return
	}
	out := make([]api.DeadCommand, 0, len(dead))
	for _, d := range dead {
		out = append(out, deadView(d))
	}
	writeJSON(w, http.StatusOK, api.ListDeadCommandsResponse{DeadCommands: out})
}

// handleGetDead answers GET /api/harvest/commands/dead/{id}, with the
// message as it came.
func (s *Server) handleGetDead(w http.ResponseWriter, r *http.Request) {
	if !s.readable(w) {
		return
	}
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id < 1 || limited(r.Context()) {
		writeError(w, http.StatusNotFound, api.CodeDeadCommandNotFound, fmt.Sprintf("no dead command %q", raw))
		return
	}
	i, own := id>>deadStoreShift, id&(1<<deadStoreShift-1)
	var d *store.DeadCommand
	err = store.ErrDeadCommandNotFound
	if db := s.pool(int(i)); db != nil && own > 0 {
		if d, err = store.GetDeadCommand(r.Context(), db, own); err == nil {
			d.ID = id
		}
	}
	if errors.Is(err, store.ErrDeadCommandNotFound) {
		writeError(w, http.StatusNotFound, api.CodeDeadCommandNotFound, fmt.Sprintf("no dead command %d", id))
		return
	}
	if err != nil {
		s.readError(w, "", err)
		return
	}
	v := deadView(*d)
	if utf8.Valid(d.Payload) && json.Valid(d.Payload) {
		v.Payload = d.Payload
	} else {
		v.PayloadBase64 = base64.StdEncoding.EncodeToString(d.Payload)
	}
	writeJSON(w, http.StatusOK, v)
}

func deadView(d store.DeadCommand) api.DeadCommand {
	return api.DeadCommand{ID: d.ID, Shard: d.Shard, StreamSeq: d.StreamSeq, CommandID: d.CommandID, Kind: d.Kind,
		Subject: d.Subject, Error: d.Error, Reason: d.Reason, DeadAt: d.DeadAt}
}

// Dead commands are numbered in each store; the API numbers them across
// the stores: store i's dead command n is n | i<<deadStoreShift, so store
// 0's (a single-store deployment's) keep their numbers whatever stores are
// added, and every id stays below 2^53 (placement.MaxStores is 64).
const deadStoreShift = 46

// listDead lists the dead commands f matches across the stores, highest
// API id first: newest first within a store, the later stores' first.
func (s *Server) listDead(ctx context.Context, f store.DeadFilter) ([]store.DeadCommand, error) {
	layout := s.cfg.Topology.Layout()
	per, err := eachStore(ctx, s, func(ctx context.Context, i int, db *pgxpool.Pool) ([]store.DeadCommand, error) {
		base := int64(i) << deadStoreShift
		if f.Shard != nil && layout.StoreOfShard(*f.Shard) != i || f.Before > 0 && f.Before <= base {
			return nil, nil
		}
		own := f
		if f.Before > base+1<<deadStoreShift {
			own.Before = 0 // every one of this store's is below it
		} else if f.Before > 0 {
			own.Before = f.Before - base
		}
		rows, err := store.ListDeadCommands(ctx, db, own)
		for j := range rows {
			rows[j].ID |= base
		}
		return rows, err
	})
	if err != nil {
		return nil, err
	}
	var all []store.DeadCommand
	for _, rows := range per {
		all = append(all, rows...)
	}
	slices.SortFunc(all, func(a, b store.DeadCommand) int { return cmp.Compare(b.ID, a.ID) })
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	return all[:min(len(all), limit)], nil
}
