//go:build darwin || freebsd

package peercred

import "golang.org/x/sys/unix"

// peerUID is the effective uid the connecting process had at connect(2).
func peerUID(fd int) (uint32, error) {
	cred, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return 0, err
	}
	return cred.Uid, nil
}
