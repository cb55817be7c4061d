package natstest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/harvest-engine/harvest/internal/testing/certtest"
)

// Operator is a NATS operator-mode trust chain: an operator, its system
// account, and an account with JetStream whose users authenticate with
// .creds files (a user JWT and its nkey seed). Options.Configure =
// o.Configure makes a server trust it.
type Operator struct {
	claims   *jwt.OperatorClaims
	sysPub   string
	account  nkeys.KeyPair
	resolver *server.MemAccResolver
	dir      string
}

// NewOperator makes an operator, its system account and its JetStream
// account.
func NewOperator(t testing.TB) *Operator {
	t.Helper()
	opKP := newKey(t, nkeys.CreateOperator)
	opPub := publicKey(t, opKP)
	claims := jwt.NewOperatorClaims(opPub)
	claims.Name = "harvest-test"
	if _, err := claims.Encode(opKP); err != nil {
		t.Fatalf("natstest: encode operator: %v", err)
	}
	o := &Operator{claims: claims, resolver: &server.MemAccResolver{}, dir: t.TempDir()}
	sysKP := newKey(t, nkeys.CreateAccount)
	o.sysPub = publicKey(t, sysKP)
	o.storeAccount(t, opKP, o.sysPub, "SYS", false)
	o.account = newKey(t, nkeys.CreateAccount)
	o.storeAccount(t, opKP, publicKey(t, o.account), "HARVEST", true)
	return o
}

func (o *Operator) storeAccount(t testing.TB, opKP nkeys.KeyPair, pub, name string, jetStream bool) {
	t.Helper()
	ac := jwt.NewAccountClaims(pub)
	ac.Name = name
	if jetStream {
		ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	}
	token, err := ac.Encode(opKP)
	if err != nil {
		t.Fatalf("natstest: encode account %s: %v", name, err)
	}
	if err := o.resolver.Store(pub, token); err != nil {
		t.Fatalf("natstest: store account %s: %v", name, err)
	}
}

// Configure puts a server in operator mode, trusting o.
func (o *Operator) Configure(opts *server.Options) {
	opts.TrustedOperators = []*jwt.OperatorClaims{o.claims}
	opts.SystemAccount = o.sysPub
	opts.AccountResolver = o.resolver
}

// UserCreds writes the .creds file of a new user of o's JetStream account
// and returns its path.
func (o *Operator) UserCreds(t testing.TB, name string) string {
	t.Helper()
	return writeCreds(t, o.dir, name, o.account)
}

// ForeignCreds writes the .creds file of a user whose account o does not
// know, whom a server trusting o refuses.
func (o *Operator) ForeignCreds(t testing.TB, name string) string {
	t.Helper()
	return writeCreds(t, o.dir, name, newKey(t, nkeys.CreateAccount))
}

func writeCreds(t testing.TB, dir, name string, account nkeys.KeyPair) string {
	t.Helper()
	user := newKey(t, nkeys.CreateUser)
	uc := jwt.NewUserClaims(publicKey(t, user))
	uc.Name = name
	token, err := uc.Encode(account)
	if err != nil {
		t.Fatalf("natstest: encode user %s: %v", name, err)
	}
	seed, err := user.Seed()
	if err != nil {
		t.Fatalf("natstest: seed of user %s: %v", name, err)
	}
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		t.Fatalf("natstest: format creds of %s: %v", name, err)
	}
	path := filepath.Join(dir, name+".creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return path
}

// NkeyUser makes a user nkey, writes its seed to a file in a temporary
// directory, and returns the file and the public key a server lists
// (server.Options.Nkeys).
func NkeyUser(t testing.TB) (seedFile, public string) {
	t.Helper()
	kp := newKey(t, nkeys.CreateUser)
	seed, err := kp.Seed()
	if err != nil {
		t.Fatalf("natstest: nkey seed: %v", err)
	}
	seedFile = filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return seedFile, publicKey(t, kp)
}

// VerifiedTLS configures a server to serve TLS with cert and to require
// from every client a certificate that the CA in caFile signed.
func VerifiedTLS(t testing.TB, cert certtest.Pair, caFile string) func(*server.Options) {
	t.Helper()
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cert.CertFile, KeyFile: cert.KeyFile, CaFile: caFile, Verify: true})
	if err != nil {
		t.Fatalf("natstest: TLS config: %v", err)
	}
	return func(opts *server.Options) {
		opts.TLS, opts.TLSVerify, opts.TLSConfig, opts.TLSTimeout = true, true, tc, 5
	}
}

func newKey(t testing.TB, create func() (nkeys.KeyPair, error)) nkeys.KeyPair {
	t.Helper()
	kp, err := create()
	if err != nil {
		t.Fatalf("natstest: create nkey: %v", err)
	}
	return kp
}

func publicKey(t testing.TB, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatalf("natstest: public key: %v", err)
	}
	return pub
}
