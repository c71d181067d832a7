package plugins

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"github.com/hashicorp/go-plugin"

	"github.com/gated/gated/internal/textcut"
)

// Bounds of what a launch keeps of its plugin's standard error: the last
// stderrLines lines, each cut to stderrLineBytes.
const (
	stderrLines     = 12
	stderrLineBytes = 512
)

// stderrTail keeps the last lines a plugin process wrote on its standard
// error, so that a launch that fails can say what the plugin said (a
// Python traceback, a missing library, a configuration error) rather than
// leave the operator with go-plugin's guesses. go-plugin writes each line
// to it, then a newline. It is safe for concurrent use.
type stderrTail struct {
	mu sync.Mutex
	// lines are the last complete lines, oldest first, and cur the line
	// being written; each holds at most stderrLineBytes+1 bytes of its
	// line, which is enough for Clip to mark the cut.
	lines [][]byte
	cur   []byte
}

func (t *stderrTail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for rest := b; ; {
		part, after, ended := bytes.Cut(rest, []byte{'\n'})
		if room := stderrLineBytes + 1 - len(t.cur); room > 0 {
			t.cur = append(t.cur, part[:min(len(part), room)]...)
		}
		if !ended {
			return len(b), nil
		}
		if len(t.lines) == stderrLines {
			t.lines = append(t.lines[:0], t.lines[1:]...)
		}
		t.lines = append(t.lines, t.cur)
		t.cur, rest = nil, after
	}
}

// last returns the last lines written, a line not yet ended included, as
// valid UTF-8 cut to stderrLineBytes, without blank lines at either end.
func (t *stderrTail) last() []string {
	t.mu.Lock()
	raw := append([][]byte(nil), t.lines...)
	if len(t.cur) > 0 {
		raw = append(raw, t.cur)
	}
	t.mu.Unlock()
	raw = raw[max(0, len(raw)-stderrLines):]
	var lines []string
	for _, l := range raw {
		line := strings.ToValidUTF8(string(bytes.TrimRight(l, "\r")), "\uFFFD")
		lines = append(lines, textcut.Clip(line, stderrLineBytes))
	}
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// go-plugin's errors for a launch without a handshake: unrecognized opens
// the error for a first line on stdout that is not one, and noLines is
// what it adds when stdout closed without a line; exitedEarly and noStart
// are whole errors.
const (
	unrecognized = "Unrecognized remote plugin message: "
	noLines      = "Failed to read any lines from plugin's stdout"
	exitedEarly  = "plugin exited before we could connect"
	noStart      = "timeout while waiting for plugin to start"
)

// launchFailed says why a launch of a plugin failed in words an operator
// can act on: how the process exited, when it did so on its own, and the
// last lines it wrote on stderr. For a missing handshake it replaces
// go-plugin's notes, which guess at causes (the architecture, the file's
// mode) and describe the sealed copy gated runs rather than the plugin's
// file. cmd is the launch's command; its state is read only once client
// is seen exited, which is after go-plugin's wait for it returned.
func launchFailed(err error, client *plugin.Client, cmd *exec.Cmd, stderr *stderrTail) error {
	how := ""
	if client.Exited() && cmd.ProcessState != nil {
		how = exitedOnItsOwn(cmd.ProcessState)
	}
	var notes []string
	msg := err.Error()
	first, rest, _ := strings.Cut(msg, "\n")
	handshake := strings.HasPrefix(msg, unrecognized) || msg == exitedEarly
	switch {
	case handshake && how != "":
		notes = append(notes, "no handshake: the plugin "+how+" before writing one")
	case strings.HasPrefix(rest, noLines):
		notes = append(notes, "no handshake: the plugin closed its standard output without writing one")
	case handshake:
		notes = append(notes, "no handshake: "+first)
	case how != "":
		notes = append(notes, "the plugin "+how)
	}
	if lines := stderr.last(); len(lines) > 0 {
		notes = append(notes, "its last lines on stderr:\n  "+strings.Join(lines, "\n  "))
	} else if handshake || strings.Contains(msg, noStart) {
		notes = append(notes, "it wrote nothing on stderr")
	}
	switch {
	case handshake:
		return errors.New(strings.Join(notes, "; "))
	case len(notes) > 0:
		return fmt.Errorf("%w; %s", err, strings.Join(notes, "; "))
	}
	return err
}

// exitedOnItsOwn says how a plugin process ended, unless it was killed
// with SIGKILL, which is how gated ends a launch that failed: "exited
// with status 3", "was killed by signal segmentation fault".
func exitedOnItsOwn(st *os.ProcessState) string {
	if st.Exited() {
		return fmt.Sprintf("exited with status %d", st.ExitCode())
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() != syscall.SIGKILL {
		return fmt.Sprintf("was killed by signal %s", ws.Signal())
	}
	return ""
}
