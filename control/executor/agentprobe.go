package executor

import (
	"os"
	"slices"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor/agent"
	"github.com/awcp/awcp/internal/sandbox"
)

// ProbeTask is how an agent is started outside any delegation — serve
// asking the ACP agent what it can do, doctor trying the agent — so that
// it starts as a delegation's agent does, or what passes there would not
// hold under serve: in base's sandbox (nil: none), as ProbeUID where the
// sandbox gives agents a user of their own, in work, with the temporary
// directory, fresh HOME (the operator's grants under the daemon's home
// linked into it) and caches of its own that a delegation's agent gets
// without a delegator's cache (confine). cleanup removes what it made.
func ProbeTask(base *sandbox.Policy, work, executorName string, env []string) (t agent.Task, cleanup func(), err error) {
	t = agent.Task{DelegationID: "probe", WorkDir: work, AccessMode: "ro", Env: slices.Clone(env)}
	if base == nil {
		return t, func() {}, nil
	}
	var user *control.LocalUser
	if base.Isolated {
		user = &control.LocalUser{UID: ProbeUID, GID: ProbeUID}
		if err := os.Chown(work, ProbeUID, ProbeUID); err != nil {
			return t, nil, err
		}
	}
	_, tmp, err := confine(&t, *base, user, "", executorName)
	if err != nil {
		return t, nil, err
	}
	return t, func() { os.RemoveAll(tmp) }, nil
}
