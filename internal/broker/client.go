package broker

import (
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// ClientOptions are the options every Harvest connection to NATS uses:
// reconnect forever, and hold no publishes while disconnected. A publish
// then fails at once and PublishCommand tries it again until its context
// ends, so a caller that gives up (ingest answering 503) has published
// nothing that a buffer could still send after its answer.
//
// Disconnections, reconnections and asynchronous errors (a slow consumer
// whose messages were dropped) go to log: each can delay work by a
// consumer's ack wait, and would otherwise leave no trace.
func ClientOptions(name string, log *slog.Logger) []nats.Option {
	log = log.With("nats_connection", name)
	return []nats.Option{
		nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats: disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Warn("nats: reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Warn("nats: asynchronous error", "subject", subject, "err", err)
		}),
	}
}
