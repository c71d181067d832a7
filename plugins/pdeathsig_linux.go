package plugins

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal asks the kernel to kill the plugin if the host dies
// without the chance to stop it (SIGKILL, OOM). The plugin's own watchdog
// covers the rare case of the launching thread exiting first.
func setParentDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// processExists reports whether pid is still a process (a zombie counts:
// it has not been reaped).
func processExists(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }
