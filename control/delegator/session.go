package delegator

import (
	"context"
	"net"
	"strconv"

	"github.com/awcp/awcp/control"
)

// OpenSession opens a connection of session delegation id's channel,
// once it runs: to the executor's agent relay, over which an editor's ACP
// session goes (control/session.go). received is how many messages of
// the session this end has received (0 at first; more when it reconnects:
// control/sessionlink.go).
func (d *Delegator) OpenSession(ctx context.Context, id string, received uint64) (net.Conn, error) {
	del, err := d.store.Delegation(id)
	if err != nil {
		return nil, err
	}
	if del.Session == "" {
		return nil, control.Errorf(control.CodeDeclined, "delegation %s is a task, not a session", id)
	}
	return d.peer(del).upgrade(ctx, "/awcp/tasks/"+id+"/acp", control.SessionUpgrade, map[string]string{
		control.SessionKeyHeader: del.SessionKey, control.SessionReceivedHeader: strconv.FormatUint(received, 10)})
}
