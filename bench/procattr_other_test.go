//go:build !linux

package bench

import "syscall"

// childProcAttr: only Linux can tie a child's life to the test's process;
// elsewhere the test's cleanup alone stops it.
func childProcAttr() *syscall.SysProcAttr { return nil }
