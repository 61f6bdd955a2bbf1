package bench

import "syscall"

// childProcAttr makes a child the test starts die with the test's process,
// even when the test binary itself is killed (a -timeout, a signal) before
// its cleanups run.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
