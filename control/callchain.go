package control

import (
	"fmt"
	"slices"
	"strings"
)

// The call chain is how AWCP agents that delegate to one another avoid
// delegating in a circle (A asks B, B asks A, …; seed 003 §10.3). An
// INVITE carries, in the extension field callChain, the agent ids the
// delegation has passed through, the delegator's own last. An executor
// whose id is already in it refuses with DECLINED, ReasonCircularCall and
// the chain; one that accepts hands the chain, its own id appended, to its
// agent in CallChainEnv, where a nested awcp-ctl (CLI or MCP) reads it and
// sends it on. A peer that knows none of this sends no chain and ignores
// the field: the loop protection then starts at the first agent that does.
const (
	// CallChainEnv is the agent's environment variable holding the chain,
	// ids separated by commas.
	CallChainEnv = "AWCP_CALL_CHAIN"
	// ReasonCircularCall is an ERROR's reason when the executor is
	// already in the call chain (the seed's circular_call_detected).
	ReasonCircularCall = "circular_call_detected"
	// MaxCallChain bounds a chain: a delegation passed through more agents
	// than this is refused as if it were circular.
	MaxCallChain = 32
	// maxAgentIDLen bounds one id of a chain.
	maxAgentIDLen = 64
)

// ParseCallChain reads a chain from CallChainEnv's form. Empty entries are
// dropped; an entry that is not a plausible agent id (too long, or holding
// anything but letters, digits, '-', '_' and '.') is an error, so that a
// chain never carries text into logs or messages.
func ParseCallChain(s string) ([]string, error) {
	var chain []string
	for _, id := range strings.Split(s, ",") {
		id = strings.TrimSpace(id)
		if id == "" {
			continue
		}
		if err := checkAgentID(id); err != nil {
			return nil, fmt.Errorf("%s: %w", CallChainEnv, err)
		}
		chain = append(chain, id)
	}
	if len(chain) > MaxCallChain {
		return nil, fmt.Errorf("%s: %d agents, more than %d", CallChainEnv, len(chain), MaxCallChain)
	}
	return chain, nil
}

// CheckCallChain validates a chain as received in an INVITE.
func CheckCallChain(chain []string) error {
	if len(chain) > MaxCallChain {
		return fmt.Errorf("call chain of %d agents, more than %d", len(chain), MaxCallChain)
	}
	for _, id := range chain {
		if err := checkAgentID(id); err != nil {
			return fmt.Errorf("call chain: %w", err)
		}
	}
	return nil
}

func checkAgentID(id string) error {
	if id == "" || len(id) > maxAgentIDLen {
		return fmt.Errorf("agent id of %d bytes", len(id))
	}
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return fmt.Errorf("agent id %q holds %q", id, r)
		}
	}
	return nil
}

// ExtendCallChain returns chain with id appended, unless id is already
// its last (an agent that delegates again from within its own task).
func ExtendCallChain(chain []string, id string) []string {
	if id == "" || (len(chain) > 0 && chain[len(chain)-1] == id) {
		return slices.Clone(chain)
	}
	return append(slices.Clone(chain), id)
}

// DelegatorCallChain is the chain a delegator with agent id self sends:
// inherited (its CallChainEnv, empty for a person's command), then self.
// A delegator started by an executor of its own agent (both programs
// share a state dir) inherits [self]; it sends [self, self], so that its
// executor tells it from a person on that machine (IsCircular).
func DelegatorCallChain(inherited []string, self string) []string {
	chain := ExtendCallChain(inherited, self)
	if self != "" && len(inherited) > 0 && len(chain) == 1 {
		chain = append(chain, self)
	}
	return chain
}

// IsCircular reports whether agent id may not take a delegation whose
// chain (as DelegatorCallChain made it) is chain: id is in it — unless
// the chain is [id] alone, a delegation begun by a person at this very
// agent's delegator (both programs on one machine sharing a state dir, a
// newcomer's first try), which passed through no executor yet.
func IsCircular(chain []string, id string) bool {
	if id == "" || (len(chain) == 1 && chain[0] == id) {
		return false
	}
	return slices.Contains(chain, id)
}

// CircularCall is the refusal of an executor whose id is in chain.
func CircularCall(self string, chain []string) *ProtocolError {
	return &ProtocolError{
		Code:      CodeDeclined,
		Message:   fmt.Sprintf("circular call: agent %s is already in this delegation's call chain %s", self, FormatCallChain(chain)),
		Hint:      "an agent may not take a delegation that passed through it; delegate to an agent outside the chain",
		Reason:    ReasonCircularCall,
		CallChain: slices.Clone(chain),
	}
}

// FormatCallChain writes a chain for people: "a → b → c".
func FormatCallChain(chain []string) string {
	if len(chain) == 0 {
		return "(empty)"
	}
	return strings.Join(chain, " → ")
}
