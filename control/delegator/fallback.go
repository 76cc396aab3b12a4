package delegator

import (
	"errors"
	"fmt"
	"strings"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// declinedFull says whether err is an executor's DECLINED for want of a
// free slot: ours and the reference implementation's both say "Maximum
// concurrent delegations reached". Any other refusal (its policy, a
// failed identity proof, the network) is not passed on to the next.
func declinedFull(err error) bool {
	var pe *control.ProtocolError
	return errors.As(err, &pe) && pe.Code == control.CodeDeclined &&
		strings.Contains(strings.ToLower(pe.Message), "maximum concurrent")
}

// nextPeer makes the first of delegation id's fallbacks its executor,
// after the one invited declined with why, and says so.
func (d *Delegator) nextPeer(id string, why error) (*lease.Delegation, error) {
	var note string
	del, err := d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
		next := del.PeerFallbacks[0]
		note = fmt.Sprintf("executor %s (%s) has no free slot (%v); inviting %s (%s) at %s, auto's next choice",
			del.PeerName, del.PeerAgentID, why, next.Name, next.AgentID, next.URL)
		del.Peer, del.PeerAgentID, del.PeerName, del.PeerKey = next.URL, next.AgentID, next.Name, next.Key
		del.PeerFallbacks = del.PeerFallbacks[1:]
		del.Notes = append(del.Notes, note)
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.log.Info("executor full; inviting the next", "delegation", id, "peer", del.Peer)
	d.note(id, note)
	return del, nil
}
