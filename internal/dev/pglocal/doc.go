// Package pglocal runs a private PostgreSQL server from the locally installed
// binaries, for `harvest dev` and for tests.
//
// [Start] initialises a cluster in Config.DataDir when it holds none (initdb),
// reuses it otherwise, and runs the postgres binary directly as a child
// process listening on 127.0.0.1 only (no Unix socket), where every local
// user reaches it: with Config.Password, every connection must give the
// password (scram-sha-256), which Start sets, with pg_hba.conf, in a
// single-user backend before the server listens. The child is tied to
// us: on Linux it receives SIGQUIT (immediate shutdown) if our process dies,
// and it sits in its own process group so a terminal's Ctrl-C reaches only
// us. [Server.Stop] performs a fast shutdown.
//
// PostgreSQL refuses to run as root. When we are root, initdb and postgres
// run as the `postgres` system user (or `nobody` if there is none) and the
// data directory is handed to that user. On Linux they reach it through a
// descriptor we open (/proc/self/fd/3), so DataDir may lie under
// directories that user cannot search (a state dir under /root, a test's
// 0700 temp dir) and no directory's mode is changed; elsewhere every parent
// directory of DataDir must let that user through, or Start fails with
// [ErrDataDirUnreachable].
//
// It knows nothing of Harvest's schema (internal/store migrates) and
// production services must not import it.
package pglocal

// Where things are:
//
//   - pglocal.go: Config, Start, Server and stopping, signalling or
//     killing it. launch.go: one start: preparing the data directory
//     (initdb), starting postgres, waiting until it is ours and ready.
//   - bindir.go: finding initdb and postgres. password.go: requiring
//     Config.Password (pg_hba.conf, a single-user backend). output.go:
//     postgres's output, kept for errors; a free port.
//   - Running as another user when we are root: runas_unix.go (which
//     user, handing it the directory), childdir.go (reaching the data
//     directory by descriptor); runas_other.go elsewhere.
//   - The child process's group, identity and death signal, by platform:
//     sysproc_linux.go, sysproc_unix.go (other Unix), sysproc_other.go.
