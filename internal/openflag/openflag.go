// Package openflag names the open(2) flags that differ by system: a
// directory opened only to be walked from with the *at calls and stat'ed.
package openflag
