package control

import "encoding/json"

// ExtensionURI names AWCP in an agent card (spec §8.3).
const ExtensionURI = "https://awcp-protocol.org/v1"

// TaskResult is the body of GET /awcp/tasks/{id}/result, which the head
// dialect added: how a delegator that lost the stream (a head executor
// replays only done) gets the outcome and the result again.
type TaskResult struct {
	Status      string   `json:"status"` // running, completed, error or not_found
	CompletedAt string   `json:"completedAt,omitempty"`
	Summary     string   `json:"summary,omitempty"`
	Highlights  []string `json:"highlights,omitempty"`
	// SnapshotBase64 is the result ZIP; like an event's, our delegator's
	// reader decodes it into ResultFile as it reads.
	SnapshotBase64 string       `json:"snapshotBase64,omitempty"`
	Error          *TaskFailure `json:"error,omitempty"`
	// ResultChecksum is the result's SHA-256 (hex), as in our done event.
	ResultChecksum string `json:"resultChecksum,omitempty"`

	ResultFile string `json:"-"`
	ResultSum  string `json:"-"` // as Event's
	ResultErr  error  `json:"-"`
}

// TaskFailure is how a task that ended badly ended.
type TaskFailure struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"`
}

// Result states of a TaskResult.
const (
	ResultRunning   = "running"
	ResultCompleted = "completed"
	ResultError     = "error"
	ResultNotFound  = "not_found"
)

// StatusReport is the body of GET /awcp/status.
type StatusReport struct {
	OK            bool             `json:"ok"`
	Name          string           `json:"name"`
	Version       string           `json:"version"`
	Active        int              `json:"active"`
	MaxConcurrent int              `json:"maxConcurrent"`
	Transports    []string         `json:"transports"`
	Delegations   []StatusLeaseRow `json:"delegations"`
	// Goroutines is the daemon's goroutine count: leak checks compare it
	// before and after a load.
	Goroutines int `json:"goroutines"`
}

// StatusLeaseRow is one delegation in a status report.
type StatusLeaseRow struct {
	DelegationID string `json:"delegationId"`
	State        string `json:"state"`
	Transport    string `json:"transport"`
	AccessMode   string `json:"accessMode"`
	ExpiresAt    string `json:"expiresAt,omitempty"`
	// For the executor's operator only (its local socket): who made it,
	// from where, and what runs for it.
	Delegator string `json:"delegator,omitempty"` // the identity key's fingerprint
	Peer      string `json:"peer,omitempty"`      // the INVITE's address
	AgentPID  int    `json:"agentPid,omitempty"`
	Prompt    string `json:"prompt,omitempty"` // its first line
}

// AgentCard is the A2A agent card with the AWCP extension of spec §8.3.
type AgentCard struct {
	Name               string          `json:"name"`
	Description        string          `json:"description"`
	URL                string          `json:"url"`
	Version            string          `json:"version"`
	Capabilities       map[string]any  `json:"capabilities"`
	DefaultInputModes  []string        `json:"defaultInputModes"`
	DefaultOutputModes []string        `json:"defaultOutputModes"`
	Skills             []CardSkill     `json:"skills"`
	Extensions         []CardExtension `json:"extensions"`
	// A2A's, where the executor has an A2A face. The card is both
	// generations' at once: 1.0's interfaces and security requirements,
	// and 0.3's protocol version, transport (URL's) and security; each
	// security scheme carries both forms (see Executor.securitySchemes).
	SupportedInterfaces  []CardInterface       `json:"supportedInterfaces,omitempty"`
	SecurityRequirements []CardRequirement     `json:"securityRequirements,omitempty"`
	ProtocolVersion      string                `json:"protocolVersion,omitempty"`
	PreferredTransport   string                `json:"preferredTransport,omitempty"`
	SecuritySchemes      map[string]any        `json:"securitySchemes,omitempty"`
	Security             []map[string][]string `json:"security,omitempty"`
}

// CardInterface is one way an A2A agent is reached (A2A 1.0's
// AgentInterface): where, by which binding, in which version.
type CardInterface struct {
	URL             string `json:"url"`
	ProtocolBinding string `json:"protocolBinding"`
	ProtocolVersion string `json:"protocolVersion"`
}

// CardRequirement is one way of authenticating A2A 1.0 accepts: every
// scheme it names (by name; scopes, none here).
type CardRequirement struct {
	Schemes map[string][]string `json:"schemes"`
}

// CardSkill is one skill of an agent card (A2A AgentSkill).
type CardSkill struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Tags        []string `json:"tags"`
}

// CardExtension declares a protocol extension.
type CardExtension struct {
	URI      string         `json:"uri"`
	Required bool           `json:"required"`
	Params   map[string]any `json:"params,omitempty"`
}

// AWCP returns the card's AWCP extension (spec §8.3), if it declares one.
func (c *AgentCard) AWCP() (CardExtension, bool) {
	for _, ext := range c.Extensions {
		if ext.URI == ExtensionURI {
			return ext, true
		}
	}
	return CardExtension{}, false
}

// Manifest is the body of GET /manifest: the agent manifest of seed 003
// §4.1 (snake_case, as there), which LAN discovery fetches for each agent
// it finds, with what a delegator needs to choose an executor in AWCP.
type Manifest struct {
	AgentID            string               `json:"agent_id"`
	Name               string               `json:"name"`
	Description        string               `json:"description"`
	Version            string               `json:"version"`
	InputContentTypes  []string             `json:"input_content_types"`
	OutputContentTypes []string             `json:"output_content_types"`
	Capabilities       []ManifestCapability `json:"capabilities"`
	Endpoints          map[string]string    `json:"endpoints"`
	AWCP               *ManifestAWCP        `json:"awcp,omitempty"`
}

// ManifestCapability is one thing the agent offers: its skills, and
// "awcp-delegation" for taking delegated workspaces.
type ManifestCapability struct {
	ID          string `json:"id"`
	Description string `json:"description"`
}

// ManifestAWCP is what an AWCP executor offers now.
type ManifestAWCP struct {
	Protocol string `json:"protocol"` // ExtensionURI
	// Transports are those usable now, preferred first; FUSE says whether
	// the live mount (sshfs) is among them.
	Transports    []string `json:"transports"`
	FUSE          bool     `json:"fuse"`
	AccessModes   []string `json:"access_modes"`
	MaxTTLSeconds int64    `json:"max_ttl_seconds"`
	MaxConcurrent int      `json:"max_concurrent"`
	FreeSlots     int      `json:"free_slots"`
	// IdentityKey is the executor's identity key (identity.go), which it
	// proves it holds in every TLS handshake; a delegator pins it.
	IdentityKey  string   `json:"identity_key,omitempty"`
	Dialects     []string `json:"dialects"`
	AuthRequired bool     `json:"auth_required"`
	// CallChain says the executor refuses circular calls (callchain.go).
	CallChain bool `json:"call_chain"`
	// Sessions are the session protocols the executor grants
	// (session.go): ["acp"] when its agent speaks ACP; ACPAgent is that
	// agent's answer to initialize (its capabilities, info and auth
	// methods), once the executor has asked it.
	Sessions []string        `json:"sessions,omitempty"`
	ACPAgent json.RawMessage `json:"acp_agent,omitempty"`
	// ACPAgentError is why the agent did not answer the executor's
	// initialize (its own words from stderr, where it wrote any): an
	// editor's gateway says so at once, where it would wait for ACPAgent.
	ACPAgentError string `json:"acp_agent_error,omitempty"`
}

// CapabilityDelegation is the manifest capability of an AWCP executor.
const CapabilityDelegation = "awcp-delegation"

// ProbeResult is the executor's answer to GET /awcp/probe?port=N (ours,
// not the specification's): whether it could open a connection to that
// port of the caller's address, as a live mount would, and whether an SSH
// server greeted it there.
type ProbeResult struct {
	Reachable bool   `json:"reachable"`
	SSH       bool   `json:"ssh"`
	Error     string `json:"error,omitempty"` // why not, when not
}
