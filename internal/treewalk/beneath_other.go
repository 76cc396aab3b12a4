//go:build !linux

package treewalk

// OpenBeneath opens name (relative, slash-separated) beneath the
// directory open at dirfd, following no symlink on the way and never
// leaving it. macOS and FreeBSD have no openat2; their one-call flags
// (O_NOFOLLOW_ANY, O_RESOLVE_BENEATH) each do half of it, so the
// component walk does all of it.
func OpenBeneath(dirfd int, name string, flags int) (int, error) {
	return openByComponents(dirfd, name, flags)
}
