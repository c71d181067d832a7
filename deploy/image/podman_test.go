package image_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"
)

// podman runs podman with storage of its own under dir, so that the test
// neither reads nor leaves images in the machine's; with runc when it is
// installed, which works where crun cannot set up cgroups.
type podman struct {
	args []string
}

func newPodman(t *testing.T, dir string) *podman {
	t.Helper()
	p := &podman{args: []string{"--root", filepath.Join(dir, "storage"), "--runroot", filepath.Join(dir, "run"), "--storage-driver", "vfs", "--events-backend", "none"}}
	if runc, err := exec.LookPath("runc"); err == nil {
		p.args = append(p.args, "--runtime", runc)
	}
	return p
}

// run runs podman with args and returns its output.
func (p *podman) run(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "podman", append(append([]string{}, p.args...), args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// TestServeUnderPodman runs the image as it is meant to run: a read-only
// root filesystem, the image's user, its data directory a volume. Its
// /readyz answers ready and it decides through the bundled reviewer; the
// image has no shell to start; podman stop ends it with status 0.
func TestServeUnderPodman(t *testing.T) {
	_, file := openImage(t)
	mode := os.Getenv("GATED_IMAGE_PODMAN")
	if mode == "off" {
		t.Skip("GATED_IMAGE_PODMAN=off")
	}
	cannot := func(format string, args ...any) {
		t.Helper()
		if mode == "require" {
			t.Fatalf(format, args...)
		}
		t.Skipf("podman cannot run the image here (GATED_IMAGE_PODMAN=require makes this a failure): "+format, args...)
	}
	if _, err := exec.LookPath("podman"); err != nil {
		cannot("%v", err)
	}
	dir := sharedDir(t)
	p := newPodman(t, dir)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if out, err := p.run(ctx, "load", "--quiet", "--input", file); err != nil {
		t.Fatalf("podman load: %v\n%s", err, out)
	}
	images, err := p.run(ctx, "images", "--quiet", "--no-trunc")
	if err != nil || images == "" {
		t.Fatalf("podman images: %v %q", err, images)
	}
	ref := strings.Fields(images)[0]
	t.Cleanup(func() {
		_, _ = p.run(context.Background(), "rm", "--all", "--force")
		_, _ = p.run(context.Background(), "rmi", "--all", "--force")
	})

	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(data, gatedUID, gatedUID); err != nil {
			t.Fatal(err)
		}
	}
	// Limits no higher than this process's: podman would otherwise ask
	// for more, which a machine without CAP_SYS_RESOURCE refuses.
	limits := []string{"--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"}
	natsAddr, httpAddr := natstest.FreeAddr(t), natstest.FreeAddr(t)
	args := append([]string{"run", "--detach", "--name", "gated", "--read-only", "--network", "host", "--volume", data + ":/data"}, limits...)
	args = append(args, ref, "serve", "--http", httpAddr, "--nats-listen", natsAddr, "--log-format", "json")
	if out, err := p.run(ctx, args...); err != nil {
		cannot("podman run: %v\n%s", err, out)
	}
	t.Logf("podman runs the image read-only as its user (%s)", strings.Join(p.args, " "))
	defer func() {
		if t.Failed() {
			logs, _ := p.run(context.Background(), "logs", "gated")
			t.Logf("the container's output:\n%s", logs)
		}
	}()
	exited := make(chan error, 1)
	go func() {
		out, err := p.run(ctx, "wait", "gated")
		if err == nil {
			err = &exitStatus{out}
		}
		exited <- err
	}()
	waitReady(t, "http://"+httpAddr+"/readyz", exited)

	root := filepath.Join(dir, "client")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	im, _ := openImage(t)
	if _, err := im.Extract(root); err != nil {
		t.Fatal(err)
	}
	decide(t, filepath.Join(root, "usr/bin/gated"), "nats://"+natsAddr)

	if out, err := p.run(ctx, "exec", "gated", "/bin/sh", "-c", "true"); err == nil {
		t.Errorf("the container started /bin/sh: %s", out)
	}
	if out, err := p.run(ctx, "stop", "--time", "40", "gated"); err != nil {
		t.Fatalf("podman stop: %v\n%s", err, out)
	}
	if code := <-exited; code.Error() != "exit status 0" {
		t.Errorf("gated in the container after podman stop: %v", code)
	}
}

// exitStatus is what podman wait printed: the container's exit status.
type exitStatus struct{ code string }

func (e *exitStatus) Error() string { return "exit status " + e.code }
