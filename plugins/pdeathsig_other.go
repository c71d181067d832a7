//go:build !linux

package plugins

import (
	"os"
	"os/exec"
	"syscall"
)

// setParentDeathSignal has no kernel support here; the plugin's watchdog
// notices a dead host instead.
func setParentDeathSignal(*exec.Cmd) {}

// processExists reports whether pid is still a process.
func processExists(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}
