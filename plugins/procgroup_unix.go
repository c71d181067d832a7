//go:build unix

package plugins

import (
	"os/exec"
	"syscall"
)

// setProcessGroup starts the plugin in a process group of its own, led
// by the plugin, so that the host can end it and everything it started
// (a wrapper's children, say) with one signal.
func setProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// killProcessGroup sends SIGKILL to every process of group pgid. A
// process that left the group (setsid) is out of its reach.
func killProcessGroup(pgid int) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}
