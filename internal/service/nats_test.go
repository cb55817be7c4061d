package service_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/service"
	"github.com/harvest-engine/harvest/internal/testing/certtest"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
)

// connectWait bounds a connection in these tests; one the server refuses
// ends at once instead of being retried for minutes (and ended by it).
const connectWait = time.Minute

// connect runs service.ConnectNATS against url with cfg's credentials, and
// checks that what it returns on success is connected and declared.
func connect(t *testing.T, url string, cfg config.Config) error {
	t.Helper()
	cfg.NATSURL, cfg.Shards = url, 2
	ctx, cancel := context.WithTimeout(context.Background(), connectWait)
	defer cancel()
	nc, top, err := service.ConnectNATS(ctx, cfg, "harvest-test", slog.New(slog.DiscardHandler))
	if err != nil {
		require.NoError(t, ctx.Err(), "refused at once, not after retrying: %v", err)
		return err
	}
	defer nc.Close()
	require.True(t, nc.IsConnected())
	for _, name := range broker.DeclaredStreams() {
		_, err := top.JS.Stream(ctx, name)
		require.NoError(t, err, "declared %s", name)
	}
	return nil
}

func TestConnectNATSWithUserAndPassword(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{Configure: func(o *server.Options) {
		o.Username, o.Password = "harvest", "s3cret"
	}})
	err := connect(t, ns.ClientURL(), config.Config{NATSUser: "harvest", NATSPassword: "wrong"})
	require.ErrorIs(t, err, nats.ErrAuthorization)
	require.EqualError(t, err, "connect to NATS "+ns.ClientURL()+": refused (check nats_credentials_file, nats_nkey_file, "+
		"nats_user and nats_password, or nats_token): nats: Authorization Violation")
	require.NoError(t, connect(t, ns.ClientURL(), config.Config{NATSUser: "harvest", NATSPassword: "s3cret"}))

	// Credentials in the URL still work, and stay out of the messages.
	addr := strings.TrimPrefix(ns.ClientURL(), "nats://")
	err = connect(t, "nats://harvest:wrong@"+addr+",t0ken@"+addr, config.Config{})
	require.ErrorIs(t, err, nats.ErrAuthorization)
	require.ErrorContains(t, err, "connect to NATS nats://harvest:xxxxx@"+addr+",nats://xxxxx@"+addr+": ")
	require.NotContains(t, err.Error(), "wrong")
	require.NotContains(t, err.Error(), "t0ken")
	require.NoError(t, connect(t, "nats://harvest:s3cret@"+addr, config.Config{}))
}

func TestConnectNATSWithAToken(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{Configure: func(o *server.Options) { o.Authorization = "t0ken" }})
	require.ErrorIs(t, connect(t, ns.ClientURL(), config.Config{NATSToken: "wrong"}), nats.ErrAuthorization)
	require.ErrorIs(t, connect(t, ns.ClientURL(), config.Config{}), nats.ErrAuthorization, "none at all")
	require.NoError(t, connect(t, ns.ClientURL(), config.Config{NATSToken: "t0ken"}))
}

func TestConnectNATSWithAnNkeySeed(t *testing.T) {
	seed, public := natstest.NkeyUser(t)
	other, _ := natstest.NkeyUser(t)
	ns := natstest.RunServer(t, natstest.Options{Configure: func(o *server.Options) {
		o.Nkeys = []*server.NkeyUser{{Nkey: public}}
	}})
	require.ErrorIs(t, connect(t, ns.ClientURL(), config.Config{NATSNkeyFile: other}), nats.ErrAuthorization)
	require.NoError(t, connect(t, ns.ClientURL(), config.Config{NATSNkeyFile: seed}))
}

func TestConnectNATSWithACredsFile(t *testing.T) {
	op := natstest.NewOperator(t)
	ns := natstest.RunServer(t, natstest.Options{Configure: op.Configure})
	require.ErrorIs(t, connect(t, ns.ClientURL(), config.Config{NATSCredentialsFile: op.ForeignCreds(t, "stranger")}), nats.ErrAuthorization)
	require.NoError(t, connect(t, ns.ClientURL(), config.Config{NATSCredentialsFile: op.UserCreds(t, "harvest")}))
}

func TestConnectNATSWithTLSAndAClientCertificate(t *testing.T) {
	ca := certtest.NewCA(t, "nats")
	ns := natstest.RunServer(t, natstest.Options{Configure: natstest.VerifiedTLS(t, ca.Server(t, "nats"), ca.CertFile)})
	client := ca.Client(t, "harvest")
	stranger := certtest.NewCA(t, "other").Client(t, "harvest")
	url := ns.ClientURL()

	// A server certificate the client has no CA for.
	err := connect(t, url, config.Config{NATSTLSCertFile: client.CertFile, NATSTLSKeyFile: client.KeyFile})
	require.ErrorContains(t, err, "refused (check nats_tls_ca_file): ")
	require.ErrorContains(t, err, "certificate signed by unknown authority")
	// A client certificate the server's CA did not sign (the client then
	// offers none: the server asks for one of its CA's), or none.
	for _, cfg := range []config.Config{
		{NATSTLSCAFile: ca.CertFile, NATSTLSCertFile: stranger.CertFile, NATSTLSKeyFile: stranger.KeyFile},
		{NATSTLSCAFile: ca.CertFile},
	} {
		err = connect(t, url, cfg)
		require.ErrorContains(t, err, "refused (check nats_tls_cert_file and nats_tls_key_file): ")
		require.ErrorContains(t, err, "remote error: tls: certificate required")
	}

	require.NoError(t, connect(t, url, config.Config{NATSTLSCAFile: ca.CertFile, NATSTLSCertFile: client.CertFile, NATSTLSKeyFile: client.KeyFile}))
}

func TestConnectNATSTakesAServerPool(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	dead := "nats://" + deadAddr(t)
	pool := dead + "," + ns.ClientURL()

	// The client tries the pool's servers in turn: the dead one first,
	// here, since randomising is off.
	opts, err := service.NATSOptions(config.Config{})
	require.NoError(t, err)
	nc, err := nats.Connect(pool, append(opts, nats.DontRandomize())...)
	require.NoError(t, err)
	require.Equal(t, ns.ClientURL(), nc.ConnectedUrl())
	require.Equal(t, []string{dead, ns.ClientURL()}, nc.Servers())
	nc.Close()

	// DialNATS connects, and declares nothing.
	nc, err = service.DialNATS(natstest.Context(t), config.Config{NATSURL: pool}, "harvest-test", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Equal(t, ns.ClientURL(), nc.ConnectedUrl())
	nc.Close()
	_, js := natstest.Connect(t, ns)
	_, err = js.Stream(natstest.Context(t), broker.CommandStream)
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)

	require.NoError(t, connect(t, pool, config.Config{}))
	require.NoError(t, connect(t, " "+dead+" , "+ns.ClientURL()+" ", config.Config{}), "spaces around the URLs")
}

func TestConnectNATSRefusesReplicasTheServerCannotPlace(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	err := connect(t, ns.ClientURL(), config.Config{NATSReplicas: 3})
	require.ErrorIs(t, err, broker.ErrReplicasUnplaceable)
	require.ErrorContains(t, err, "config: nats_replicas 3: stream HARVEST_CMD: 3 replicas cannot be placed on a NATS server that is not clustered (cluster size 1)")
}

func TestConnectNATSReplicatesOnACluster(t *testing.T) {
	c := natstest.RunCluster(t, 3)
	require.NoError(t, connect(t, c.URL(), config.Config{NATSReplicas: 3}))
	_, js := natstest.ConnectURL(t, c.URL())
	for _, name := range broker.DeclaredStreams() {
		natstest.WaitReplicas(natstest.Context(t), t, js, name, 3)
	}
}

func TestNATSOptionsNameTheKeyOfABadSetting(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		return path
	}
	missing := filepath.Join(dir, "missing")
	op := natstest.NewOperator(t)
	creds, err := os.ReadFile(op.UserCreds(t, "harvest"))
	require.NoError(t, err)
	seed, _ := natstest.NkeyUser(t)
	otherSeed, err := os.ReadFile(seed)
	require.NoError(t, err)
	// The JWT of one user with the seed of another.
	mismatched := write("mismatched.creds", string(creds[:bytes.Index(creds, []byte("-----BEGIN USER NKEY SEED"))])+
		"-----BEGIN USER NKEY SEED-----\n"+string(otherSeed)+"\n------END USER NKEY SEED------\n")
	ca := certtest.NewCA(t, "nats")
	client := ca.Client(t, "harvest")

	for name, tc := range map[string]struct {
		cfg  config.Config
		want string
	}{
		"creds missing":      {config.Config{NATSCredentialsFile: missing}, "config: nats_credentials_file: open " + missing},
		"creds not creds":    {config.Config{NATSCredentialsFile: write("x.creds", "hello")}, "config: nats_credentials_file: "},
		"creds mismatched":   {config.Config{NATSCredentialsFile: mismatched}, "the nkey seed is not the one of the JWT's user"},
		"nkey missing":       {config.Config{NATSNkeyFile: missing}, "config: nats_nkey_file: nats: open " + missing},
		"nkey not a seed":    {config.Config{NATSNkeyFile: write("x.nk", "hello")}, "config: nats_nkey_file: "},
		"ca missing":         {config.Config{NATSTLSCAFile: missing}, "config: nats_tls_ca_file: "},
		"ca not PEM":         {config.Config{NATSTLSCAFile: write("ca.pem", "hello")}, "config: nats_tls_ca_file: "},
		"cert missing":       {config.Config{NATSTLSCertFile: missing, NATSTLSKeyFile: client.KeyFile}, "config: nats_tls_cert_file and nats_tls_key_file: "},
		"key not the cert's": {config.Config{NATSTLSCertFile: client.CertFile, NATSTLSKeyFile: ca.Client(t, "other").KeyFile}, "config: nats_tls_cert_file and nats_tls_key_file: "},
		"two ways":           {config.Config{NATSNkeyFile: seed, NATSToken: "t"}, "config: nats_nkey_file and nats_token: give NATS one way to authenticate"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := service.NATSOptions(tc.cfg)
			require.ErrorContains(t, err, tc.want)
		})
	}
	opts, err := service.NATSOptions(config.Config{NATSCredentialsFile: op.UserCreds(t, "ok"), NATSTLSCAFile: ca.CertFile,
		NATSTLSCertFile: client.CertFile, NATSTLSKeyFile: client.KeyFile})
	require.NoError(t, err)
	require.Len(t, opts, 3)
	opts, err = service.NATSOptions(config.Config{})
	require.NoError(t, err)
	require.Empty(t, opts)
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().(*net.TCPAddr)
	require.NoError(t, l.Close())
	return net.JoinHostPort(addr.IP.String(), strconv.Itoa(addr.Port))
}
