//go:build !awcp_portable

package portable

// Selected: this build runs each system's own implementations.
const Selected = false
