//go:build !linux

package plugins

import "os/exec"

// setParentDeathSignal has no kernel support here; the plugin's watchdog
// notices a dead host instead.
func setParentDeathSignal(*exec.Cmd) {}
