//go:build !unix

package plugins

import "os/exec"

// setProcessGroup does nothing here: there are no process groups, and
// only the plugin's own process is ended.
func setProcessGroup(*exec.Cmd) {}

// killProcessGroup does nothing here; see setProcessGroup.
func killProcessGroup(int) {}
