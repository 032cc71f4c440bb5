//go:build !linux

package procid

import "errors"

var errNotLinux = errors.New("procid: only implemented on Linux")

// Where returns an error: /proc is Linux's.
func Where() (Here, error) { return Here{}, errNotLinux }

// ReadStat returns an error: /proc is Linux's.
func ReadStat(pid int) (Stat, error) { return Stat{}, errNotLinux }

// Self returns an error: /proc is Linux's.
func Self() (ID, error) { return ID{}, errNotLinux }
