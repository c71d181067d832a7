//go:build !unix

package bench

import (
	"os/exec"
	"syscall"
)

func processGroup() *syscall.SysProcAttr { return nil }

func killGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
