// Package untrusted holds the checks every road from the network or the
// executor back into the owner's machine goes through: what the executor,
// its agent or a stranger on the network sends is taken apart here, by
// one set of rules, before any part of awcp acts on it.
//
//   - JSON (JSONKeys): a message whose objects hold a key twice, or two
//     keys that differ only in case, means two things to two parsers
//     (Go's decoder folds case and keeps the last, JavaScript keeps the
//     last exactly): it is refused at every hop, whatever it carries.
//   - git (GitControlled): the paths of a repository that git executes or
//     obeys without being asked — config, hooks, info, the object
//     database's alternates — are never written by the executor unless the
//     owner says so.
//   - terminals (Name, Text): a name or text from the other machine
//     reaches a terminal quoted, so it can forge no line of ours and send
//     no escape sequence.
//
// SECURITY.md's "The trust boundary" says which code calls which check.
package untrusted
