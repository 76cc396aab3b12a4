package control

import "errors"

// HostKeyOption is the key of workDir.options that carried the
// delegator's host key before it had a field of its own
// (WorkDirInfo.HostKey); an executor still reads it from our earlier
// delegators. It is the only option an executor interprets.
const HostKeyOption = "hostKey"

// errMounted refuses to delete a work dir through a live mount.
var errMounted = errors.New("the work dir is still a mount point; refusing to delete through it")
