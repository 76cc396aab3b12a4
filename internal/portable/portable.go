// Package portable says whether this build runs, on Linux, the portable
// twins of what differs by system — the server's root walked a component
// at a time (os.Root) instead of openat2, the polled watch instead of
// fanotify and inotify — as macOS and FreeBSD run them. `make
// test-portable` builds the programs so (go build -tags awcp_portable)
// and runs the end-to-end suite against them.
package portable
