package delegator

import (
	"context"
	"net"

	"github.com/awcp/awcp/control"
)

// OpenSession opens the channel of session delegation id, once it runs:
// the connection to the executor's agent relay over which an editor's ACP
// session goes (control/session.go). The caller closes it to end the
// session.
func (d *Delegator) OpenSession(ctx context.Context, id string) (net.Conn, error) {
	del, err := d.store.Delegation(id)
	if err != nil {
		return nil, err
	}
	if del.Session == "" {
		return nil, control.Errorf(control.CodeDeclined, "delegation %s is a task, not a session", id)
	}
	return d.peer(del).upgrade(ctx, "/awcp/tasks/"+id+"/acp", control.SessionUpgrade, map[string]string{control.SessionKeyHeader: del.SessionKey})
}
