package service

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/harvest-engine/harvest/internal/config"
)

// NATSOptions are the client options of the configuration's NATS
// credentials and TLS settings: a .creds file (nats_credentials_file), an
// nkey seed (nats_nkey_file), a user and password (nats_user,
// nats_password), or a token (nats_token); the CA that signs the servers'
// certificates (nats_tls_ca_file) and the client's own certificate
// (nats_tls_cert_file, nats_tls_key_file). The files are read now, so that
// one that cannot be read or holds no credentials, key or certificate is
// an error naming its key, and read again on each (re)connection, so that
// replaced files are picked up. Two ways to authenticate at once are an
// error too.
func NATSOptions(cfg config.Config) ([]nats.Option, error) {
	var opts, tlsOpts []nats.Option
	var auth []string
	if cfg.NATSCredentialsFile != "" {
		auth = append(auth, "nats_credentials_file")
		if err := checkCredentials(cfg.NATSCredentialsFile); err != nil {
			return nil, fmt.Errorf("config: nats_credentials_file: %w", err)
		}
		opts = append(opts, nats.UserCredentials(cfg.NATSCredentialsFile))
	}
	if cfg.NATSNkeyFile != "" {
		auth = append(auth, "nats_nkey_file")
		opt, err := nats.NkeyOptionFromSeed(cfg.NATSNkeyFile)
		if err != nil {
			return nil, fmt.Errorf("config: nats_nkey_file: %w", err)
		}
		opts = append(opts, opt)
	}
	if cfg.NATSUser != "" {
		auth = append(auth, "nats_user")
		opts = append(opts, nats.UserInfo(cfg.NATSUser, cfg.NATSPassword))
	}
	if cfg.NATSToken != "" {
		auth = append(auth, "nats_token")
		opts = append(opts, nats.Token(cfg.NATSToken))
	}
	if len(auth) > 1 {
		return nil, fmt.Errorf("config: %s: give NATS one way to authenticate", strings.Join(auth, " and "))
	}
	// nats.RootCAs and nats.ClientCert load their files when applied, and
	// again on each connection; applied here to a throwaway Options, they
	// report a bad file at once.
	var probe nats.Options
	if cfg.NATSTLSCAFile != "" {
		opt := nats.RootCAs(cfg.NATSTLSCAFile)
		if err := opt(&probe); err != nil {
			return nil, fmt.Errorf("config: nats_tls_ca_file: %w", err)
		}
		tlsOpts = append(tlsOpts, opt)
	}
	if cfg.NATSTLSCertFile != "" || cfg.NATSTLSKeyFile != "" {
		opt := nats.ClientCert(cfg.NATSTLSCertFile, cfg.NATSTLSKeyFile)
		if err := opt(&probe); err != nil {
			return nil, fmt.Errorf("config: nats_tls_cert_file and nats_tls_key_file: %w", err)
		}
		tlsOpts = append(tlsOpts, opt)
	}
	return append(opts, tlsOpts...), nil
}

// checkCredentials checks that path is a .creds file: a user JWT and the
// seed of that user's nkey.
func checkCredentials(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	token, err := nkeys.ParseDecoratedJWT(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return fmt.Errorf("%s holds no user JWT: %w", path, err)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(data)
	if err != nil {
		return fmt.Errorf("%s holds no user nkey seed: %w", path, err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if pub != claims.Subject {
		return fmt.Errorf("%s: the nkey seed is not the one of the JWT's user %s", path, claims.Subject)
	}
	return nil
}

// refusedByNATS says, when err is a NATS server's refusal of the
// connection's credentials or TLS, which trying again does not change,
// which settings to look at; else it is "". Refusals are an authorization
// violation, a server certificate the client does not trust, a handshake
// the server ends (a client certificate it does not accept, or none), or
// TLS wanted on one side only.
func refusedByNATS(err error) string {
	var (
		verify    *tls.CertificateVerificationError
		authority x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		op        *net.OpError
	)
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrAccountAuthExpired):
		return "nats_credentials_file, nats_nkey_file, nats_user and nats_password, or nats_token"
	case errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted):
		return "nats_tls_ca_file, nats_tls_cert_file and nats_tls_key_file, or tls:// in nats_url"
	case errors.As(err, &verify), errors.As(err, &authority), errors.As(err, &hostname), errors.As(err, &invalid):
		return "nats_tls_ca_file"
	case errors.As(err, &op) && op.Op == "remote error":
		// A TLS alert: the server ended the handshake.
		return "nats_tls_cert_file and nats_tls_key_file"
	}
	return ""
}

// redactedURLs is the server pool nats_url names with any password or
// token in the URLs masked, for logs and errors.
func redactedURLs(pool string) string {
	urls := strings.Split(pool, ",")
	for i, s := range urls {
		s = strings.TrimSpace(s)
		parse := s
		if !strings.Contains(s, "://") {
			parse = "nats://" + s
		}
		u, err := url.Parse(parse)
		switch {
		case err != nil:
			urls[i] = "(a URL that does not parse)"
		case u.User == nil:
			urls[i] = s
		default:
			if _, set := u.User.Password(); set {
				u.User = url.UserPassword(u.User.Username(), "xxxxx")
			} else {
				u.User = url.User("xxxxx")
			}
			urls[i] = u.String()
		}
	}
	return strings.Join(urls, ",")
}
