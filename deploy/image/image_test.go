package image_test

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gated/gated/deploy/image"
	"github.com/gated/gated/internal/natstest"
)

// The image under test is the archive GATED_IMAGE names (make test-deploy
// builds it with make image first). GATED_IMAGE_PODMAN says whether the
// image is also run under podman: "require" fails when it cannot run,
// "try" (make test-deploy's) skips that part then, saying why, and "off"
// does not try.

// wantFiles are the regular files of the image, and all of them.
var wantFiles = []string{"etc/group", "etc/passwd", "etc/ssl/certs/ca-certificates.crt", "usr/bin/gated"}

// gatedUID is the image's user.
const gatedUID = 65532

// openImage opens the image under test, or skips the test when none is
// named.
func openImage(t *testing.T) (*image.Image, string) {
	t.Helper()
	file := os.Getenv("GATED_IMAGE")
	if file == "" {
		t.Skip("GATED_IMAGE names no image archive: make test-deploy builds one and runs this test")
	}
	im, err := image.Open(file)
	if err != nil {
		t.Fatalf("opening %s: %v", file, err)
	}
	return im, file
}

// TestImageConfig: the image runs gated as a non-root numeric user, with
// its data directory and /tmp as volumes, and carries the OCI labels.
func TestImageConfig(t *testing.T) {
	im, _ := openImage(t)
	rc := im.Config.Runtime
	uid, gid, ok := strings.Cut(rc.User, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 || !ok {
		t.Errorf("user %q: want a numeric uid:gid that is not root's", rc.User)
	}
	if n, err := strconv.Atoi(gid); err != nil || n == 0 {
		t.Errorf("user %q: want a numeric gid that is not root's", rc.User)
	}
	if !slices.Equal(rc.Entrypoint, []string{"/usr/bin/gated"}) {
		t.Errorf("entrypoint %q, want /usr/bin/gated", rc.Entrypoint)
	}
	for _, v := range []string{"/data", "/tmp"} {
		if _, ok := rc.Volumes[v]; !ok {
			t.Errorf("volumes %v lack %s", rc.Volumes, v)
		}
	}
	if !slices.Contains(rc.Env, "GATED_DATA_DIR=/data") {
		t.Errorf("env %q lacks GATED_DATA_DIR=/data", rc.Env)
	}
	l := rc.Labels
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(l["org.opencontainers.image.revision"]) {
		t.Errorf("label revision %q, want a commit", l["org.opencontainers.image.revision"])
	}
	if l["org.opencontainers.image.version"] == "" || l["org.opencontainers.image.source"] == "" {
		t.Errorf("labels %v lack the version or the source", l)
	}
	created, err := time.Parse(time.RFC3339, l["org.opencontainers.image.created"])
	if err != nil {
		t.Errorf("label created: %v", err)
	} else if c, err := time.Parse(time.RFC3339, im.Config.Created); err != nil || !c.Equal(created) {
		t.Errorf("image created %q, label %q: want the same time", im.Config.Created, l["org.opencontainers.image.created"])
	}
	if im.Config.OS != "linux" {
		t.Errorf("os %q", im.Config.OS)
	}
}

// TestImageFiles: the root filesystem holds the static gated binary, the
// user database and the CA bundle, and nothing else: no shell, no other
// executable, no set-id bit, no link; the data directory is the user's.
func TestImageFiles(t *testing.T) {
	im, _ := openImage(t)
	root := t.TempDir()
	files, err := im.Extract(root)
	if err != nil {
		t.Fatal(err)
	}
	var regular []string
	for _, f := range files {
		switch {
		case f.Mode.IsRegular():
			regular = append(regular, f.Path)
			if f.Mode&0o111 != 0 && f.Path != "usr/bin/gated" {
				t.Errorf("%s is executable: only gated should be", f.Path)
			}
		case f.Mode.IsDir():
		default:
			t.Errorf("%s has mode %s: only directories and regular files belong in the image", f.Path, f.Mode)
		}
		if f.Mode&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			t.Errorf("%s has a set-id bit (%s)", f.Path, f.Mode)
		}
		base := filepath.Base(f.Path)
		if slices.Contains([]string{"sh", "bash", "dash", "ash", "busybox", "toybox"}, base) {
			t.Errorf("the image holds a shell: %s", f.Path)
		}
		switch f.Path {
		case "data":
			if f.UID != gatedUID || f.Mode.Perm() != 0o700 {
				t.Errorf("/data: owner %d, mode %s; want %d, 0700", f.UID, f.Mode, gatedUID)
			}
		case "tmp":
			if f.Mode&fs.ModeSticky == 0 || f.Mode.Perm() != 0o777 {
				t.Errorf("/tmp: mode %s, want 1777", f.Mode)
			}
		default:
			if f.UID != 0 || f.Mode.Perm()&0o022 != 0 {
				t.Errorf("%s: owner %d, mode %s; want root's, written by nobody else", f.Path, f.UID, f.Mode)
			}
		}
	}
	slices.Sort(regular)
	if !slices.Equal(regular, wantFiles) {
		t.Errorf("regular files %q, want %q", regular, wantFiles)
	}

	bin := filepath.Join(root, "usr/bin/gated")
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("gated is dynamically linked (program header %s)", p.Type)
		}
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("build settings CGO_ENABLED=%q -trimpath=%q, want 0 and true", settings["CGO_ENABLED"], settings["-trimpath"])
	}
	if rev := im.Config.Runtime.Labels["org.opencontainers.image.revision"]; settings["vcs.revision"] != rev || settings["vcs.modified"] != "false" {
		t.Errorf("binary built from revision %q (modified %q), the label says %q", settings["vcs.revision"], settings["vcs.modified"], rev)
	}
	out, err := exec.CommandContext(t.Context(), bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if v := im.Config.Runtime.Labels["org.opencontainers.image.version"]; !strings.HasPrefix(string(out), "gated "+v+" ") {
		t.Errorf("gated version says %q, the label %q", out, v)
	}
}

// TestServeFromExportedFiles runs gated serve from the image's root
// filesystem, as the image's user when this test runs as root, with the
// embedded NATS server: /readyz answers ready, an action the bundled sop
// reviewer must review is approved through it and one the policy refuses
// is rejected, SIGTERM ends it cleanly, and nothing under the root
// filesystem changed: serve writes only to its data directory and /tmp.
func TestServeFromExportedFiles(t *testing.T) {
	im, _ := openImage(t)
	base := sharedDir(t)
	root := filepath.Join(base, "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := im.Extract(root); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, root)
	data, tmp := filepath.Join(base, "data"), filepath.Join(base, "tmp")
	for _, d := range []string{data, tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			if err := os.Chown(d, gatedUID, gatedUID); err != nil {
				t.Fatal(err)
			}
		}
	}
	personas := configMapDir(t, base, "personas", filepath.Join("..", "..", "examples", "personas", "operator.md"))
	natsAddr, httpAddr := natstest.FreeAddr(t), natstest.FreeAddr(t)
	bin := filepath.Join(root, "usr/bin/gated")
	cmd := exec.Command(bin, "serve", "--data-dir", data, "--nats-listen", natsAddr, "--http", httpAddr, "--log-format", "json", "--personas", personas)
	cmd.Env = append(slices.Clone(im.Config.Runtime.Env), "TMPDIR="+tmp, "HOME="+data)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: gatedUID, Gid: gatedUID}}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("gated serve's output:\n%s", logs.String())
		}
	}()

	waitReady(t, "http://"+httpAddr+"/readyz", exited)
	decide(t, bin, "nats://"+natsAddr)
	// The persona from the ConfigMap-shaped directory is served: the
	// policy refuses it as a reviewer, since it may write.
	propose(t, bin, "nats://"+natsAddr, "rejected-reviewer-tools.json", 3, "rejected", "policy", "")

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if err := <-exited; err != nil {
		t.Errorf("gated serve after SIGTERM: %v", err)
	}
	if after := snapshot(t, root); !slices.Equal(before, after) {
		t.Errorf("serve changed the root filesystem:\nbefore %q\nafter  %q", before, after)
	}
}

// configMapDir lays files out under base/name as Kubernetes mounts a
// ConfigMap: the files in a hidden directory of their own, a ..data link
// to it, and a link to ..data/<file> for each, as the chart mounts the
// personas, the policy and the catalogs.
func configMapDir(t *testing.T, base, name string, files ...string) string {
	t.Helper()
	dir := filepath.Join(base, name)
	hidden := filepath.Join(dir, "..2026_01_01_00_00_00.000000001")
	if err := os.MkdirAll(hidden, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(hidden), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(hidden, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", filepath.Base(f)), filepath.Join(dir, filepath.Base(f))); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// sharedDir is a temporary directory the image's user can reach, removed
// at the end of the test.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gated-image-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// snapshot lists every entry under root with its mode, size and time.
func snapshot(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, p+" "+fi.Mode().String()+" "+strconv.FormatInt(fi.Size(), 10)+" "+fi.ModTime().String())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitReady polls url until it answers 200 with ready true, failing
// when gated exits first or it does not within a minute.
func waitReady(t *testing.T, url string, exited <-chan error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-exited:
			t.Fatalf("gated serve exited before it was ready: %v", err)
		default:
		}
		res, err := http.Get(url)
		if err == nil {
			var body struct {
				Ready bool `json:"ready"`
			}
			derr := json.NewDecoder(res.Body).Decode(&body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK && derr == nil && body.Ready {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer ready within a minute (last error %v)", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// decide proposes two examples through the gate at url with the image's
// own gated: an approval by the bundled sop reviewer, which runs from the
// image's binary as a plugin process, and a policy rejection.
func decide(t *testing.T, bin, url string) {
	t.Helper()
	propose(t, bin, url, "approved.json", 0, "approved", "review", "sop")
	propose(t, bin, url, "rejected-force-approve.json", 3, "rejected", "policy", "")
}

// propose proposes examples/proposals/file with gated propose and checks
// its exit status, the verdict's outcome and stage, and the plugin of its
// one review when plugin is not "".
func propose(t *testing.T, bin, url, file string, exit int, outcome, stage, plugin string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, "propose", "--nats-url", url, "-f", filepath.Join("..", "..", "examples", "proposals", file))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exitErr *exec.ExitError
	code := 0
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatalf("propose %s: %v", file, err)
	}
	var v struct {
		Outcome string `json:"outcome"`
		Stage   string `json:"stage"`
		Reason  string `json:"reason"`
		Reviews []struct {
			Plugin string `json:"plugin"`
		} `json:"reviews"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("propose %s printed %q (stderr %q): %v", file, out, stderr.String(), err)
	}
	if code != exit || v.Outcome != outcome || v.Stage != stage {
		t.Errorf("propose %s: exit %d, %s at %s (%s); want exit %d, %s at %s", file, code, v.Outcome, v.Stage, v.Reason, exit, outcome, stage)
	}
	if plugin != "" && (len(v.Reviews) != 1 || v.Reviews[0].Plugin != plugin) {
		t.Errorf("propose %s: reviews %+v, want one by %s", file, v.Reviews, plugin)
	}
}
