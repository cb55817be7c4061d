// Package dirlock keeps a directory to one process at a time: an advisory
// lock (flock) on a file inside it, which the kernel releases however the
// holder ends, a crash or SIGKILL included, so a lock is never stale. The
// file records the holder's process id, for messages.
//
// harvest dev's state dir and the test harnesses' temporary directories
// use it. On systems without flock a Lock records the holder and excludes
// no one.
package dirlock
