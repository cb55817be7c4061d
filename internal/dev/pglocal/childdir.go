package pglocal

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
)

// childDirFD is the descriptor on which a child running as another user
// gets its directory: the first of exec.Cmd.ExtraFiles.
const childDirFD = 3

// childDir is how initdb or postgres reaches its data directory: by its
// path, or, when it runs as another user on Linux (we are root), by an
// open descriptor. Then the child gets the directory, opened by us, as
// descriptor 3, and is told the path /proc/self/fd/3, which the kernel
// resolves to the open directory without checking the directories above
// it: PostgreSQL, run as the postgres user, keeps its data inside a state
// dir under /root (mode 0700) without any directory's mode being changed.
// It needs search permission on nothing but its own data directory, which
// it owns. PostgreSQL works relative to its data directory once it has
// changed into it, and its backends inherit the descriptor, so nothing
// else reaches for the path; SHOW data_directory answers /proc/self/fd/3.
type childDir struct {
	path string   // what the child is told: the directory, or /proc/self/fd/3
	file *os.File // the open directory handed to the child; nil for a path
}

// byDescriptor says whether children reach their directory by descriptor.
func (l *launcher) byDescriptor() bool {
	return l.who != nil && runtime.GOOS == "linux"
}

// openForChild prepares dir for a child; close it once the child started.
func (l *launcher) openForChild(dir string) (childDir, error) {
	if !l.byDescriptor() {
		return childDir{path: dir}, nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return childDir{}, fmt.Errorf("pglocal: open data dir: %w", err)
	}
	return childDir{path: "/proc/self/fd/" + strconv.Itoa(childDirFD), file: f}, nil
}

// apply hands the directory to cmd, and starts cmd in it when it can
// reach it by its path (else in /, which every user may search).
func (c childDir) apply(cmd *exec.Cmd) {
	if c.file == nil {
		cmd.Dir = c.path
		return
	}
	cmd.ExtraFiles = []*os.File{c.file} // descriptor 3 in the child
	cmd.Dir = "/"
}

// close closes our copy of the descriptor; the child keeps its own.
func (c childDir) close() {
	if c.file != nil {
		_ = c.file.Close()
	}
}
