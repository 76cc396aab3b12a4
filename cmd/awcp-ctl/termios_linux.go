package main

import "golang.org/x/sys/unix"

// getTermios is the ioctl that reads a terminal's settings: a descriptor
// it succeeds on is a terminal.
const getTermios = unix.TCGETS
