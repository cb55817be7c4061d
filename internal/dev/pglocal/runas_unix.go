//go:build unix

package pglocal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// runAsCandidates are the accounts PostgreSQL runs as when we are root, in
// order of preference.
var runAsCandidates = []string{"postgres", "nobody"}

// runAs is the unprivileged identity initdb and postgres run as when we are
// root. A nil *runAs means "run as ourselves".
type runAs struct {
	name string
	cred *credential
}

// lookupRunAs returns nil unless the effective user is root; PostgreSQL
// refuses to run as root, so then it returns the first existing account of
// runAsCandidates.
func lookupRunAs() (*runAs, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range runAsCandidates {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("pglocal: user %q: %w", name, err)
		}
		// Groups is empty, so the child drops root's supplementary groups.
		return &runAs{name: name, cred: &credential{Uid: uint32(uid), Gid: uint32(gid)}}, nil
	}
	return nil, fmt.Errorf("pglocal: running as root, and PostgreSQL refuses to: none of the users %q exists to run it as", runAsCandidates)
}

// chownR hands dir and everything under it to r.
func (r *runAs) chownR(dir string) error {
	if r == nil {
		return nil
	}
	uid, gid := int(r.cred.Uid), int(r.cred.Gid)
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid) //nolint:gosec // G122: Lchown never follows a symlink, so none can lead it out of dir
	})
	if err != nil {
		return fmt.Errorf("pglocal: chown -R %s to %s: %w", dir, r.name, err)
	}
	return nil
}

// checkTraversable makes sure r can reach dir: every ancestor of dir must
// grant r search (x) permission. dir itself is not checked; the caller owns
// it and hands it to r.
func (r *runAs) checkTraversable(dir string) error {
	if r == nil {
		return nil
	}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("pglocal: %w", err)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			perm := fi.Mode().Perm()
			var bit fs.FileMode
			switch {
			case st.Uid == r.cred.Uid:
				bit = 0o100
			case st.Gid == r.cred.Gid:
				bit = 0o010
			default:
				bit = 0o001
			}
			if perm&bit == 0 {
				return fmt.Errorf("pglocal: %w: directory %s (mode %v, owner %d:%d) is not traversable by user %q, which runs PostgreSQL because we are root: chmod o+x it or put DataDir elsewhere",
					ErrDataDirUnreachable, d, perm, st.Uid, st.Gid, r.name)
			}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// credential returns the identity for child processes, nil for ourselves.
func (r *runAs) credential() *credential {
	if r == nil {
		return nil
	}
	return r.cred
}
