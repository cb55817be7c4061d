package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/registry"
	"github.com/harvest-engine/harvest/internal/wire"
)

// fuzzLiveBuild is the build of the one live worker fuzzBuildServer's
// workers bucket holds: it registers onboarding on the default task
// queue.
const fuzzLiveBuild = "orders-1.0.0"

// fuzzBuildServer is fuzzServer with one live worker of fuzzLiveBuild,
// so that a start naming that build can be accepted.
func fuzzBuildServer(t testing.TB) *Server {
	s := fuzzServer()
	value, err := json.Marshal(registry.Entry{Worker: "w1", ExpiresAt: time.Now().Add(24 * time.Hour), BuildID: fuzzLiveBuild})
	require.NoError(t, err)
	s.workers = registry.NewIndex(oneWorker{entry: kvEntry{key: registry.Key(registry.KindWorkflow, "onboarding", wire.DefaultTaskQueue, "w1"), value: value}},
		s.cfg.Logger)
	return s
}

// oneWorker is a workers bucket that holds one registration.
type oneWorker struct {
	jetstream.KeyValue
	entry kvEntry
}

func (oneWorker) Bucket() string { return "HARVEST_WORKERS" }

// Watch delivers the registration when the filter (a key, or keys
// ending in ".*" or ".>") takes its key, then says that the current
// values are all in.
func (w oneWorker) Watch(_ context.Context, filter string, _ ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	ch := emptyWatcher(make(chan jetstream.KeyValueEntry, 2))
	prefix, wild := strings.CutSuffix(filter, "*")
	if !wild {
		prefix, wild = strings.CutSuffix(filter, ">")
	}
	if filter == w.entry.key || (wild && strings.HasPrefix(w.entry.key, prefix)) {
		ch <- w.entry
	}
	ch <- nil
	return ch, nil
}

// kvEntry is one value of a bucket.
type kvEntry struct {
	key   string
	value []byte
}

func (e kvEntry) Bucket() string                  { return "HARVEST_WORKERS" }
func (e kvEntry) Key() string                     { return e.key }
func (e kvEntry) Value() []byte                   { return e.value }
func (e kvEntry) Revision() uint64                { return 1 }
func (e kvEntry) Created() time.Time              { return time.Now() }
func (e kvEntry) Delta() uint64                   { return 0 }
func (e kvEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// FuzzStartVersioning checks a start's and a signal-with-start's
// versioning and build_id, as POST /api/harvest/workflows/onboarding/start
// and .../signal-with-start check them before publishing, on a server
// where one live worker of build orders-1.0.0 registers onboarding. The
// body is the fuzzed bytes, or (build set) one made of the fuzzed
// versioning and build_id, each present or not:
//   - a refusal is a 4xx (never a 5xx) with a client error code and a
//     message fit for a log line; one of versioning is invalid_versioning
//     and names the field, one of build_id invalid_build and names it;
//   - an accepted request carries a versioning the scheduler takes ("",
//     pinned or auto_upgrade) and no pinned build, or pinned with the
//     live build; a build_id given is that build, pinned, and a
//     versioning given is kept;
//   - with a built body, what is refused is exactly what the rules say:
//     an unknown versioning, a build_id beside auto_upgrade, a build_id
//     that is no build id or no live worker's (with either code when
//     both fields are at fault: a value PostgreSQL cannot store is
//     refused before the values are checked).
func FuzzStartVersioning(f *testing.F) {
	for _, body := range []string{
		`{}`, `{"versioning": "pinned"}`, `{"versioning": "auto_upgrade"}`, `{"versioning": "Pinned"}`, `{"versioning": ""}`,
		`{"versioning": null, "build_id": null}`, `{"build_id": "orders-1.0.0"}`, `{"versioning": "pinned", "build_id": "orders-1.0.0"}`,
		`{"versioning": "auto_upgrade", "build_id": "orders-1.0.0"}`, `{"build_id": "orders-2.0.0"}`, `{"build_id": ""}`,
		`{"build_id": "orders 1"}`, `{"build_id": "` + strings.Repeat("b", 300) + `"}`, `{"build_id": "a\u0000b"}`, `{"versioning": "\ud800"}`,
		`{"versioning": 1}`, `{"build_id": ["x"]}`, `{"Versioning": "pinned", "BUILD_ID": "orders-1.0.0"}`,
		`{"versioning": "pinned", "versioning": "sometimes"}`, `{"build_id": "orders-1.0.0", "task_queue": "other"}`,
		`{"workflow_id": "o-1", "signal_name": "item", "build_id": "orders-1.0.0"}`,
		`{"workflow_id": "o-1", "signal_name": "item", "versioning": "auto_upgrade", "build_id": "x"}`,
		`{"workflow_id": "o-1", "signal_name": "item", "versioning": "\u0085"}`,
	} {
		f.Add(false, []byte(body), false, "", false, "", false)
		f.Add(true, []byte(body), false, "", false, "", false)
	}
	for _, v := range []struct {
		hasV bool
		v    string
		hasB bool
		b    string
	}{
		{true, "pinned", true, fuzzLiveBuild}, {false, "", true, fuzzLiveBuild}, {true, "auto_upgrade", true, fuzzLiveBuild},
		{true, "pinned", true, "orders-9"}, {true, "pinned", false, ""}, {true, "x\x00y", false, ""}, {false, "", true, "\xff"},
		{false, "", true, "orders-1.0.0\n"}, {true, "pinned", true, ""}, {true, "", true, fuzzLiveBuild},
	} {
		f.Add(false, []byte{}, true, v.v, v.hasV, v.b, v.hasB)
		f.Add(true, []byte{}, true, v.v, v.hasV, v.b, v.hasB)
	}

	s := fuzzBuildServer(f)
	f.Fuzz(func(t *testing.T, withStart bool, body []byte, build bool, versioning string, hasVersioning bool, buildID string, hasBuildID bool) {
		if build {
			fields := map[string]any{}
			if withStart {
				fields["workflow_id"], fields["signal_name"] = "o-1", "item"
			}
			if hasVersioning {
				fields["versioning"] = versioning
			}
			if hasBuildID {
				fields["build_id"] = buildID
			}
			var err error
			body, err = json.Marshal(fields)
			require.NoError(t, err)
		}

		var (
			versioningGiven, buildGiven *string
			gotVersioning, gotBuild     string
			rej                         *rejection
		)
		if withStart {
			// As handleSignalWithStart checks it, short of publishing.
			req, _, r := s.parseSignalWithStart(httptest.NewRecorder(), fuzzRequest("/api/harvest/workflows/onboarding/signal-with-start", body, false, ""))
			var queue string
			if rej = r; rej == nil {
				queue, rej = s.startQueue("onboarding", req.TaskQueue)
			}
			if rej == nil {
				rej = s.checkKnown(t.Context(), "onboarding", queue)
			}
			if rej == nil {
				gotVersioning, gotBuild, rej = s.startVersioning(t.Context(), "onboarding", queue, req.Versioning, req.BuildID)
			}
			versioningGiven, buildGiven = req.Versioning, req.BuildID
		} else {
			r := fuzzRequest("/api/harvest/workflows/onboarding/start", body, false, "")
			r.SetPathValue("name", "onboarding")
			p, keyErr, r2 := s.parseStart(httptest.NewRecorder(), r)
			if keyErr != nil {
				require.True(t, isKeyError(keyErr), "unexpected key error: %v", keyErr)
				return
			}
			rej, gotVersioning, gotBuild = r2, p.versioning, p.pinnedBuild
			versioningGiven, buildGiven = p.req.Versioning, p.req.BuildID
		}

		if rej != nil {
			require.Less(t, rej.status, http.StatusInternalServerError, "%+v", rej.body)
			requireRejection(t, rej)
			switch rej.body.Field {
			case "versioning":
				require.Equal(t, api.CodeInvalidVersioning, rej.body.Error, "%+v", rej.body)
			case "build_id":
				require.Equal(t, api.CodeInvalidBuild, rej.body.Error, "%+v", rej.body)
			}
		} else {
			switch gotVersioning {
			case "", wire.VersioningAutoUpgrade:
				require.Empty(t, gotBuild, "a build without pinned")
			case wire.VersioningPinned:
				if gotBuild != "" {
					require.NoError(t, dedup.ValidateBuildID(gotBuild))
					require.Equal(t, fuzzLiveBuild, gotBuild, "pinned to a build no live worker runs")
				}
			default:
				t.Fatalf("versioning %q accepted", gotVersioning)
			}
			if buildGiven != nil {
				require.Equal(t, *buildGiven, gotBuild)
				require.Equal(t, wire.VersioningPinned, gotVersioning)
			}
			if versioningGiven != nil {
				require.Equal(t, *versioningGiven, gotVersioning)
			}
		}

		if !build {
			return
		}
		if len(body) > fuzzMaxBody {
			require.NotNil(t, rej, "a body of %d bytes accepted", len(body))
			require.Equal(t, http.StatusRequestEntityTooLarge, rej.status, "%+v", rej.body)
			return
		}
		// A body of these fields alone: refused exactly by the rules, for
		// either field at fault when both are.
		var v, b string
		if hasVersioning {
			require.NotNil(t, versioningGiven, "%s", body)
			v = *versioningGiven
		}
		if hasBuildID {
			require.NotNil(t, buildGiven, "%s", body)
			b = *buildGiven
		}
		var want []string
		if hasVersioning && v != wire.VersioningPinned && v != wire.VersioningAutoUpgrade {
			want = append(want, api.CodeInvalidVersioning)
		}
		if hasBuildID && (v == wire.VersioningAutoUpgrade || b != fuzzLiveBuild) {
			want = append(want, api.CodeInvalidBuild)
		}
		if len(want) == 0 {
			require.Nil(t, rej, "%s: %+v", body, rej)
			return
		}
		require.NotNil(t, rej, "%s accepted", body)
		require.Contains(t, want, rej.body.Error, "%s: %+v", body, rej.body)
		require.Equal(t, http.StatusBadRequest, rej.status, "%s: %+v", body, rej.body)
	})
}

// TestStartVersioningSeedsCover: the fuzz target's server accepts a
// start pinned to its live build and refuses one pinned to another, so
// that its seeds reach both sides.
func TestStartVersioningSeedsCover(t *testing.T) {
	s := fuzzBuildServer(t)
	live, other := fuzzLiveBuild, "orders-2.0.0"
	v, b, rej := s.startVersioning(t.Context(), "onboarding", wire.DefaultTaskQueue, nil, &live)
	require.Nil(t, rej)
	require.Equal(t, wire.VersioningPinned, v)
	require.Equal(t, live, b)
	_, _, rej = s.startVersioning(t.Context(), "onboarding", wire.DefaultTaskQueue, nil, &other)
	require.NotNil(t, rej)
	require.Equal(t, api.CodeInvalidBuild, rej.body.Error)
	require.True(t, bytes.Contains([]byte(rej.body.Message), []byte(other)), rej.body.Message)
}
