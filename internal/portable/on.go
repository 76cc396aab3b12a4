//go:build awcp_portable

package portable

// Selected: this build runs the portable twins (go build -tags awcp_portable).
const Selected = true
