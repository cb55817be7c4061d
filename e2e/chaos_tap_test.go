//go:build linux

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/broker"
)

// tap listens, as a plain NATS subscriber, to the traffic of the command
// and task streams: every publish (with its Nats-Msg-Id), the PubAck that
// answered it (stream sequence, duplicate or not), every delivery to a
// consumer and every acknowledgement. When a start is lost or an
// execution stuck, its messages' journey says where it ended: never
// stored, stored and lost in a restart, delivered and never acknowledged,
// acknowledged without effect, or dropped as a duplicate of a message the
// stream no longer holds.
type tap struct {
	mu      sync.Mutex
	events  []tapEvent
	replies map[string]int // publish reply inbox: the publish's index in events
	subs    []*nats.Subscription
	dropped int
}

// tapEvent is one message seen.
type tapEvent struct {
	at        time.Time
	kind      string // publish, puback, deliver, ack
	subject   string // of the published or delivered message
	msgID     string
	stream    string
	seq       uint64
	consumer  string
	delivered uint64 // delivery count
	duplicate bool
	reply     string // ack: +ACK, -NAK, +WPI, +TERM; puback: the error
	data      []byte // publish and deliver: the start of the payload
}

func (e tapEvent) String() string {
	at := e.at.Format("15:04:05.000")
	switch e.kind {
	case "publish":
		return fmt.Sprintf("%s publish %s msg_id %s", at, e.subject, e.msgID)
	case "puback":
		if e.reply != "" {
			return fmt.Sprintf("%s   puback for msg_id %s: error %s", at, e.msgID, e.reply)
		}
		return fmt.Sprintf("%s   puback for msg_id %s: %s seq %d duplicate=%v", at, e.msgID, e.stream, e.seq, e.duplicate)
	case "deliver":
		return fmt.Sprintf("%s deliver %s seq %d (%s) to %s, delivery %d, msg_id %s", at, e.stream, e.seq, e.subject, e.consumer, e.delivered, e.msgID)
	default:
		return fmt.Sprintf("%s ack %s seq %d by %s: %s", at, e.stream, e.seq, e.consumer, e.reply)
	}
}

const tapData = 600 // bytes of payload kept per message

// By default the tap hears the replies to requests ("_INBOX.<id>.<token>":
// PubAcks) but not pull deliveries ("_INBOX.<id>"): a subscriber to every
// pull inbox is interest in each of them, so the server would deliver a
// task to the pull request of a worker that has stopped pulling (or died)
// instead of dropping the request, and the task would wait out its ack
// wait. deliveries turns that on, for a diagnosis that needs the
// deliveries and can afford the distortion.
func startTap(nc *nats.Conn, deliveries bool) (*tap, error) {
	t := &tap{replies: map[string]int{}}
	inboxes := "_INBOX.*.*"
	if deliveries {
		inboxes = "_INBOX.>"
	}
	for subject, handler := range map[string]nats.MsgHandler{
		"harvest.cmd.>":  t.onPublish,
		"harvest.task.>": t.onPublish,
		inboxes:          t.onInbox,
		"$JS.ACK.>":      t.onAck,
	} {
		sub, err := nc.Subscribe(subject, handler)
		if err != nil {
			t.stop()
			return nil, fmt.Errorf("tap %s: %w", subject, err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		t.subs = append(t.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		t.stop()
		return nil, fmt.Errorf("tap: %w", err)
	}
	return t, nil
}

func (t *tap) stop() {
	for _, s := range t.subs {
		_ = s.Unsubscribe()
	}
}

// reset forgets what was seen (a new trial begins).
func (t *tap) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events, t.replies, t.dropped = nil, map[string]int{}, 0
}

func (t *tap) add(e tapEvent) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.events) >= 500_000 {
		t.dropped++
		return -1
	}
	t.events = append(t.events, e)
	return len(t.events) - 1
}

func clip(data []byte) []byte { return bytes.Clone(data[:min(len(data), tapData)]) }

func (t *tap) onPublish(m *nats.Msg) {
	if m.Reply == "" {
		return // not a JetStream publish
	}
	i := t.add(tapEvent{at: time.Now(), kind: "publish", subject: m.Subject, msgID: m.Header.Get(jetstream.MsgIDHeader), data: clip(m.Data)})
	if i >= 0 {
		t.mu.Lock()
		t.replies[m.Reply] = i
		t.mu.Unlock()
	}
}

func (t *tap) onInbox(m *nats.Msg) {
	if ack, ok := parseAckSubject(m.Reply); ok {
		if ack.stream != broker.CommandStream && ack.stream != broker.TaskStream {
			return
		}
		ack.at, ack.kind, ack.subject, ack.msgID, ack.data = time.Now(), "deliver", m.Subject, m.Header.Get(jetstream.MsgIDHeader), clip(m.Data)
		t.add(ack)
		return
	}
	t.mu.Lock()
	i, ok := t.replies[m.Subject]
	var pub tapEvent
	if ok {
		pub = t.events[i]
		delete(t.replies, m.Subject)
	}
	t.mu.Unlock()
	if !ok {
		return
	}
	var pa struct {
		Stream    string `json:"stream"`
		Seq       uint64 `json:"seq"`
		Duplicate bool   `json:"duplicate"`
		Error     *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	e := tapEvent{at: time.Now(), kind: "puback", subject: pub.subject, msgID: pub.msgID}
	if err := json.Unmarshal(m.Data, &pa); err != nil {
		e.reply = fmt.Sprintf("unreadable %q", m.Data)
	} else if pa.Error != nil {
		e.reply = pa.Error.Description
	}
	if len(m.Data) == 0 {
		e.reply = "empty answer (" + m.Header.Get("Status") + " " + m.Header.Get("Description") + ")"
	}
	e.stream, e.seq, e.duplicate = pa.Stream, pa.Seq, pa.Duplicate
	t.add(e)
}

func (t *tap) onAck(m *nats.Msg) {
	ack, ok := parseAckSubject(m.Subject)
	if !ok || (ack.stream != broker.CommandStream && ack.stream != broker.TaskStream) {
		return
	}
	ack.at, ack.kind, ack.reply = time.Now(), "ack", string(m.Data)
	if ack.reply == "" {
		ack.reply = "+ACK"
	}
	t.add(ack)
}

// parseAckSubject reads a JetStream ack subject:
// $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>,
// or the form with a domain and an account hash before the stream.
func parseAckSubject(s string) (tapEvent, bool) {
	if !strings.HasPrefix(s, "$JS.ACK.") {
		return tapEvent{}, false
	}
	tok := strings.Split(s, ".")
	var at int
	switch {
	case len(tok) == 9:
		at = 2
	case len(tok) >= 12:
		at = 4
	default:
		return tapEvent{}, false
	}
	delivered, err1 := strconv.ParseUint(tok[at+2], 10, 64)
	seq, err2 := strconv.ParseUint(tok[at+3], 10, 64)
	if err1 != nil || err2 != nil {
		return tapEvent{}, false
	}
	return tapEvent{stream: tok[at], consumer: tok[at+1], delivered: delivered, seq: seq}, true
}

// journey returns, in order, the events of the messages that name any of
// needles (in their payload or as their msg id), their PubAcks, and the
// deliveries and acks of the stream sequences they got.
func (t *tap) journey(needles []string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	names := func(e tapEvent) bool {
		for _, n := range needles {
			if e.msgID == n || bytes.Contains(e.data, []byte(n)) {
				return true
			}
		}
		return false
	}
	type ref struct {
		stream string
		seq    uint64
	}
	ids, seqs := map[string]bool{}, map[ref]bool{}
	for _, e := range t.events {
		if (e.kind == "publish" || e.kind == "deliver") && names(e) {
			if e.msgID != "" {
				ids[e.msgID] = true
			}
			if e.kind == "deliver" {
				seqs[ref{e.stream, e.seq}] = true
			}
		}
	}
	for _, e := range t.events {
		if e.kind == "puback" && ids[e.msgID] && e.seq != 0 {
			seqs[ref{e.stream, e.seq}] = true
		}
	}
	var out []string
	for _, e := range t.events {
		var keep bool
		switch e.kind {
		case "publish":
			keep = names(e) || ids[e.msgID]
		case "puback":
			keep = ids[e.msgID]
		default:
			keep = seqs[ref{e.stream, e.seq}] || names(e)
		}
		if keep {
			out = append(out, e.String())
		}
	}
	if t.dropped > 0 {
		out = append(out, fmt.Sprintf("(the tap dropped %d messages: it keeps 500000)", t.dropped))
	}
	return slices.Clip(out)
}
