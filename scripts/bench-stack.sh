#!/usr/bin/env bash
# bench-stack.sh: run `harvest bench --addr` against a stack of separate
# processes on loopback, the shape a deployment has, and print what each
# process spent in CPU. docs/benchmarks.md gives the figures it made.
#
#   scripts/bench-stack.sh [stack options] -- [harvest bench options]
#   scripts/bench-stack.sh --nats 3 --sync always -- --workload W1 --n 10000
#
# Stack options (defaults in brackets):
#   --nats 1|3        NATS servers, as one cluster; 3 runs nats_replicas 3 [1]
#   --sync always     JetStream fsyncs each write before acknowledging it
#                     (nats-server's sync_interval) [every 2 minutes]
#   --pairs K         scheduler + worker pairs [1]
#   --shards S        logical shards, of each store [1]
#   --stores K        K PostgreSQL servers, each a store (docs/deploy.md) [1]
#   --tokens N        the API requires a token; N tokens configured, the
#                     bench sends the last [0: open]
#   --scrape D        scrape every process's /metrics every D seconds [off]
#   --trace RATIO     tracing on, sampled at RATIO (0.01, 1), exported over
#                     OTLP/HTTP to a sink that discards it [off]
#   --retention D     the schedulers prune executions closed D ago, e.g.
#                     30s [off: the default retention, 7 days]
#   --keep            leave the state directory (logs) behind
#
# It builds the binaries and nats-server (from the module go.mod names),
# starts a private PostgreSQL (as the postgres user when run as root),
# durable as in production (fsync on), and removes everything afterwards.
# It needs go, curl, python3 (free ports, the OTLP sink) and PostgreSQL's
# server binaries (HARVEST_PG_BIN, else /usr/lib/postgresql/<newest>/bin).
set -euo pipefail

nats=1 sync="" pairs=1 shards=1 stores=1 tokens=0 scrape=0 trace="" retention="" keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --nats) nats=$2; shift 2 ;;
    --sync) sync=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --stores) stores=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --scrape) scrape=$2; shift 2 ;;
    --trace) trace=$2; shift 2 ;;
    --retention) retention=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-stack: unknown option $1 (--help lists them)" >&2; exit 2 ;;
  esac
done
case "$nats" in 1|3) ;; *) echo "bench-stack: --nats 1 or 3" >&2; exit 2 ;; esac
case "$sync" in ""|always) ;; *) echo "bench-stack: --sync takes always" >&2; exit 2 ;; esac

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/harvest-bench-stack.XXXXXX")
chmod 755 "$work"
pids=()
pg_ctl="" pgdirs=()
cleanup() {
  local rc=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  for d in "${pgdirs[@]}"; do as_pg "$pg_ctl" -D "$d" -m fast -w stop >/dev/null 2>&1 || true; done
  if [ "$keep" = 1 ] || [ $rc != 0 ]; then echo "bench-stack: logs in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# A free TCP port on loopback.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_http() {
  local url=$1 what=$2
  for _ in $(seq 1 300); do
    if curl -fsS -o /dev/null "$url" 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  echo "bench-stack: $what not ready at $url (logs in $work)" >&2
  return 1
}

echo "bench-stack: building into $work/bin" >&2
(cd "$root" && go build -o "$work/bin/" ./cmd/... && go build -o "$work/bin/nats-server" github.com/nats-io/nats-server/v2)

# PostgreSQL, durable: one server a store.
pgbin=${HARVEST_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
pg_ctl="$pgbin/pg_ctl"
pgurls=()
for i in $(seq 1 "$stores"); do
  d="$work/pg-$i"
  mkdir "$d"
  [ "$(id -u)" = 0 ] && chown postgres "$d"
  as_pg "$pgbin/initdb" -D "$d" -U harvest -A trust >/dev/null
  pgport=$(port)
  pgdirs+=("$d")
  as_pg "$pg_ctl" -D "$d" -l "$d/server.log" -w \
    -o "-p $pgport -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c max_connections=300" start >/dev/null
  as_pg "$pgbin/createdb" -h 127.0.0.1 -p "$pgport" -U harvest harvest
  pgurls+=("postgres://harvest@127.0.0.1:$pgport/harvest?sslmode=disable")
done
storesconf=""
if [ "$stores" = 1 ]; then
  export HARVEST_DATABASE_URL=${pgurls[0]}
else
  storesconf="stores:"$'\n'
  for i in "${!pgurls[@]}"; do
    storesconf+="  - {name: s$((i + 1)), database_url: \"${pgurls[$i]}\", mode: writable}"$'\n'
  done
fi

# NATS: one server, or three in a cluster.
natsurls=() monitors=() routes=()
for i in $(seq 1 "$nats"); do
  cport[$i]=$(port) rport[$i]=$(port) mport[$i]=$(port)
  natsurls+=("nats://127.0.0.1:${cport[$i]}")
  monitors+=("http://127.0.0.1:${mport[$i]}")
  routes+=("nats-route://127.0.0.1:${rport[$i]}")
done
for i in $(seq 1 "$nats"); do
  conf="$work/nats-$i.conf"
  {
    echo "server_name: nats-$i"
    echo "listen: 127.0.0.1:${cport[$i]}"
    echo "http: 127.0.0.1:${mport[$i]}"
    echo "jetstream { store_dir: \"$work/nats-$i\""
    [ -n "$sync" ] && echo "  sync_interval: always"
    echo "}"
    if [ "$nats" = 3 ]; then
      echo "cluster { name: harvest, listen: 127.0.0.1:${rport[$i]}, routes: [$(IFS=,; echo "${routes[*]}")] }"
    fi
  } >"$conf"
  "$work/bin/nats-server" -c "$conf" >"$work/nats-$i.log" 2>&1 &
  pids+=($!)
done
for m in "${monitors[@]}"; do wait_http "$m/healthz?js-enabled-only=true" "nats-server"; done
export HARVEST_NATS_URL
HARVEST_NATS_URL=$(IFS=,; echo "${natsurls[*]}")
export HARVEST_NATS_REPLICAS=$nats HARVEST_SHARDS=$shards HARVEST_LOG_LEVEL=${HARVEST_LOG_LEVEL:-warn}

# Tracing: a sink that answers every export 200, keeps nothing, and
# counts the exports and their bytes.
if [ -n "$trace" ]; then
  sinkport=$(port)
  python3 - "$sinkport" >"$work/otlp-sink.log" 2>&1 <<'EOF' &
import http.server, sys, threading
lock, n, size = threading.Lock(), 0, 0
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        global n, size
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with lock:
            n, size = n + 1, size + len(body)
            print(n, size, flush=True)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF
  pids+=($!)
  export OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$sinkport"
  export OTEL_TRACES_SAMPLER=parentbased_traceidratio OTEL_TRACES_SAMPLER_ARG=$trace
fi

# The API's tokens: tokens-1 that the bench never sends, and its own last,
# so that each request is checked against the list.
ingestconf="$work/ingest.yaml"
token=""
{
  echo "workflows: {bench_echo: {}, collect: {}}"
  printf %s "$storesconf"
  if [ "$tokens" -gt 0 ]; then
    echo "auth:"
    echo "  tokens:"
    for i in $(seq 1 "$tokens"); do
      t=$("$work/bin/harvest" token new)
      echo "    - {name: t$i, sha256: $(printf %s "$t" | sha256sum | cut -d' ' -f1), scopes: [admin]}"
      token=$t
    done
  fi
} >"$ingestconf"
schedconf="$work/scheduler.yaml"
printf %s "$storesconf" >"$schedconf"
if [ -n "$retention" ]; then
  printf 'retention: %s\nstart_idempotency_window: %s\n' "$retention" "$retention" >>"$schedconf"
fi

declare -A procs
admins=()
for i in $(seq 1 "$pairs"); do
  a=$(port)
  HARVEST_ADMIN_ADDR=127.0.0.1:$a "$work/bin/scheduler" --config "$schedconf" >"$work/scheduler-$i.log" 2>&1 &
  pids+=($!) && procs[scheduler-$i]=$!
  admins+=("http://127.0.0.1:$a")
  wait_http "http://127.0.0.1:$a/readyz" "scheduler $i"
done
for i in $(seq 1 "$pairs"); do
  a=$(port)
  HARVEST_ADMIN_ADDR=127.0.0.1:$a "$work/bin/worker" >"$work/worker-$i.log" 2>&1 &
  pids+=($!) && procs[worker-$i]=$!
  admins+=("http://127.0.0.1:$a")
  wait_http "http://127.0.0.1:$a/readyz" "worker $i"
done
httpport=$(port) metricsport=$(port)
HARVEST_HTTP_ADDR=127.0.0.1:$httpport HARVEST_METRICS_ADDR=127.0.0.1:$metricsport \
  "$work/bin/ingest" --config "$ingestconf" >"$work/ingest.log" 2>&1 &
pids+=($!) && procs[ingest]=$!
admins+=("http://127.0.0.1:$metricsport")
wait_http "http://127.0.0.1:$httpport/readyz" "ingest"

if [ "$scrape" != 0 ]; then
  (while true; do
    for a in "${admins[@]}"; do curl -fsS -o /dev/null "$a/metrics" || true; done
    sleep "$scrape"
  done) >/dev/null 2>&1 &
  pids+=($!)
fi

# CPU seconds (user + system) a process and its children have spent.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15 + $16 + $17) / hz }' "/proc/$1/stat"; }
# PostgreSQL's, every server's: the postmaster's, its backends' that
# ended, and the live backends'.
pgcpu() {
  local d pm
  for d in "${pgdirs[@]}"; do
    pm=$(head -1 "$d/postmaster.pid")
    cpu "$pm"
    for p in $(pgrep -P "$pm" || true); do [ -r "/proc/$p/stat" ] && cpu "$p"; done
  done | awk '{ t += $1 } END { print t }'
}
declare -A before
for name in "${!procs[@]}"; do before[$name]=$(cpu "${procs[$name]}"); done
for m in "${!monitors[@]}"; do before[nats-$((m + 1))]=$(cpu "${pids[$m]}"); done
pgbefore=$(pgcpu)

status=0
"$work/bin/harvest" bench --addr "http://127.0.0.1:$httpport" ${token:+--token "$token"} "$@" || status=$?

{
  echo "bench-stack: CPU seconds during the run, by process:"
  for name in $(printf '%s\n' "${!procs[@]}" | sort); do
    printf '  %-12s %6.2f\n' "$name" "$(awk -v a="$(cpu "${procs[$name]}")" -v b="${before[$name]}" 'BEGIN { print a - b }')"
  done
  for m in "${!monitors[@]}"; do
    printf '  %-12s %6.2f\n' "nats-$((m + 1))" "$(awk -v a="$(cpu "${pids[$m]}")" -v b="${before[nats-$((m + 1))]}" 'BEGIN { print a - b }')"
  done
  if [ -n "$trace" ]; then
    echo "bench-stack: OTLP exports received (requests, bytes): $(tail -1 "$work/otlp-sink.log")"
  fi
  printf '  %-12s %6.2f\n' postgres "$(awk -v a="$(pgcpu)" -v b="$pgbefore" 'BEGIN { print a - b }')"
} >&2
exit $status
