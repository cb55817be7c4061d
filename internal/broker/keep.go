package broker

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The keeper subjects: one in each work-queue stream, outside every
// consumer's filter (a shard's is harvest.cmd.<shard>.>, a task queue's
// harvest.task.<queue>.>, each at least one token longer), so that no
// consumer ever takes a keeper.
const (
	CommandKeeperSubject = "harvest.cmd._keep"
	TaskKeeperSubject    = "harvest.task._keep"
)

// KeepInterval is how often Keep looks at the streams.
const KeepInterval = 250 * time.Millisecond

// keepTimeout bounds one keeper's publish and purge.
const keepTimeout = 2 * time.Second

// Keep holds a keeper message near the end of each work-queue stream on
// file storage, until ctx ends: every interval, when the stream has taken
// messages since its last keeper, it publishes one on the stream's keeper
// subject and purges the older ones.
//
// Why: when an acknowledgement removes the last message of a file
// stream's last block, nats-server (2.15.3) removes the block and creates
// a new file for the next writes, to keep a tombstone of the last
// sequence. The command and task streams are work queues that a stack
// keeping up drains after nearly every batch and task, so each drain cost
// a file's unlink and creation: about 14% of `harvest dev`'s CPU at 16
// submitters (docs/benchmarks.md). A block holding a keeper never empties.
// A block that rolls over leaves the keeper behind until the next one,
// an interval later; the purge then empties the old block, which goes
// without a new file, since it is not the last.
//
// A round looks at the stream's last message first, and leaves the
// stream alone when it is a keeper (this process's or another's): nothing
// was published since, so that keeper is still in the last block, and an
// idle deployment writes nothing. Several processes may keep the same
// streams: those that saw the same last message publish one keeper
// between them (its message id names that message), and each purge keeps
// only the newest keeper, whoever published it.
// Errors (a stream full, NATS away) are logged at debug and tried again
// next interval: a keeper is an optimisation, never a condition of the
// streams' work.
func (t *Topology) Keep(ctx context.Context, interval time.Duration, log *slog.Logger) {
	var streams []*keptStream
	for _, k := range []*keptStream{{stream: t.commands, subject: CommandKeeperSubject}, {stream: t.tasks, subject: TaskKeeperSubject}} {
		if k.stream != nil && k.stream.CachedInfo().Config.Storage == jetstream.FileStorage {
			streams = append(streams, k)
		}
	}
	if len(streams) == 0 {
		return
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		for _, k := range streams {
			if err := t.keep(ctx, k); err != nil && ctx.Err() == nil {
				log.Debug("keep a work-queue stream's last block", "subject", k.subject, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

type keptStream struct {
	stream  jetstream.Stream
	subject string
	// kept is the sequence of the last keeper this process published or
	// found last in the stream, 0 before it has.
	kept uint64
}

// keep publishes one keeper on k's subject and purges the older ones,
// unless the stream's last message is already a keeper.
func (t *Topology) keep(ctx context.Context, k *keptStream) error {
	ctx, cancel := context.WithTimeout(ctx, keepTimeout)
	defer cancel()
	info, err := k.stream.Info(ctx)
	if err != nil {
		return err
	}
	last := info.State.LastSeq
	if last != 0 && last == k.kept {
		return nil
	}
	if last != 0 {
		// Another process's keeper, or this one's before a restart.
		m, err := k.stream.GetLastMsgForSubject(ctx, k.subject)
		switch {
		case err == nil && m.Sequence == last:
			k.kept = last
			return nil
		case err != nil && !errors.Is(err, jetstream.ErrMsgNotFound):
			return err
		}
	}
	// The id names the last message this round saw: two processes that
	// saw the same one publish one keeper between them, the broker
	// dropping the second as a duplicate (its ack names the first).
	ack, err := t.JS.Publish(ctx, k.subject, nil, jetstream.WithMsgID(keeperID(last)))
	if err != nil {
		return err
	}
	if err := k.stream.Purge(ctx, jetstream.WithPurgeSubject(k.subject), jetstream.WithPurgeKeep(1)); err != nil {
		return err
	}
	k.kept = ack.Sequence
	return nil
}

// keeperID is the message id of a keeper published after the message at
// sequence last.
func keeperID(last uint64) string {
	return "_keep." + strconv.FormatUint(last, 10)
}
