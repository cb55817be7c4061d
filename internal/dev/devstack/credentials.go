package devstack

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// credentialsFile is the file in the state dir that keeps what the
// embedded NATS server and the private PostgreSQL require of a client.
const credentialsFile = "credentials.json"

// natsUser is the user the embedded NATS server knows; the private
// PostgreSQL's is pglocal.DefaultUser.
const natsUser = "harvest"

// credentials are the secrets of a state dir's servers. They are made at
// the first start on the state dir and kept, so that a worker connected
// with the NATS URL of one run reconnects to the next.
type credentials struct {
	NATSPassword     string `json:"nats_password"`
	PostgresPassword string `json:"postgres_password"`
}

// loadCredentials reads the state dir's credentials, making those it
// lacks: all of them for a new state dir, or one from before harvest dev
// had credentials (the private PostgreSQL takes its password at start).
// A file that others could read is a secret no longer: its credentials
// are replaced.
func loadCredentials(stateDir string, log *slog.Logger) (credentials, error) {
	path := filepath.Join(stateDir, credentialsFile)
	var c credentials
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, err := os.Stat(filepath.Join(stateDir, "nats")); err == nil {
			log.Info("this state dir has no credentials yet: its NATS server and PostgreSQL now require the ones made for it; "+
				"a worker of your own needs the new HARVEST_NATS_URL (nats.url in the state dir)",
				"file", path)
		}
	case err != nil:
		return c, fmt.Errorf("state dir credentials: %w", err)
	case !fi.Mode().IsRegular():
		return c, fmt.Errorf("state dir credentials: %s is not a regular file: remove it, and harvest dev makes new credentials", path)
	case fi.Mode().Perm()&0o077 != 0:
		log.Warn("the state dir's credentials were readable by other users: replacing them",
			"file", path, "mode", fi.Mode().Perm().String())
	default:
		data, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("state dir credentials: %w", err)
		}
		if err := json.Unmarshal(data, &c); err != nil {
			log.Warn("the state dir's credentials do not parse: replacing them", "file", path, "err", err)
			c = credentials{}
		}
	}
	if c.NATSPassword != "" && c.PostgresPassword != "" {
		return c, nil
	}
	if c.NATSPassword == "" {
		c.NATSPassword = rand.Text()
	}
	if c.PostgresPassword == "" {
		c.PostgresPassword = rand.Text()
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return c, fmt.Errorf("state dir credentials: %w", err)
	}
	if err := writePrivate(path, append(data, '\n')); err != nil {
		return c, fmt.Errorf("state dir credentials: %w", err)
	}
	return c, nil
}

// WritePrivate replaces the file at path with data, readable and writable
// by its owner alone (mode 0600), whatever the mode of the file it
// replaces: it writes a new file beside it and renames it into place.
func WritePrivate(path string, data []byte) error { return writePrivate(path, data) }

func writePrivate(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*") // mode 0600
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err := errors.Join(err, f.Close()); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return nil
}

// makePrivate creates the state dir with mode 0700, or makes an existing
// one 0700, so that other local users reach neither the NATS store, nor
// the credentials, nor the NATS URL in it. A directory others share (the
// sticky bit: /tmp), or one we may not change, is left as it is, with a
// warning.
func makePrivate(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	open := func(err error) {
		log.Warn("the state dir is open to other users, and harvest dev leaves it so: give it a directory of its own (--state-dir)",
			"state_dir", dir, "mode", fi.Mode().Perm().String(), "err", err)
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		open(errors.New("a shared directory (sticky bit)"))
		return nil
	}
	if err := os.Chmod(dir, 0o700); err != nil { //nolint:gosec // G302: a directory, owner-only
		open(err)
		return nil
	}
	log.Info("made the state dir private to its owner (mode 0700)", "state_dir", dir, "was", fi.Mode().Perm().String())
	return nil
}

// natsClientURL is the URL of the embedded NATS server at port, with its
// credentials.
func natsClientURL(port int, c credentials) string {
	u := url.URL{
		Scheme: "nats",
		User:   url.UserPassword(natsUser, c.NATSPassword),
		Host:   net.JoinHostPort(natsHost, strconv.Itoa(port)),
	}
	return u.String()
}

// redactURLs masks the passwords of a comma-separated list of URLs, and a
// user alone (a NATS token), for logs and errors.
func redactURLs(list string) string {
	urls := strings.Split(list, ",")
	for i, s := range urls {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || u.User == nil {
			continue
		}
		if _, set := u.User.Password(); !set {
			u.User = url.User("xxxxx")
		}
		urls[i] = u.Redacted()
	}
	return strings.Join(urls, ",")
}
