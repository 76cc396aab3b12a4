// Package layout holds the test that keeps the import rules of
// ARCHITECTURE.md: which of the module's packages each package may import.
package layout
