package plugins

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// selfExe names the running executable's own image: whatever is at its
// path now, this is the file the process was started from.
const selfExe = "/proc/self/exe"

// selfImage is the image of a bundled reviewer: gated's own running
// executable, started through /proc/self/exe, which names the file gated
// runs from even when its path has been replaced since.
func selfImage() (*image, error) {
	f, err := os.Open(selfExe)
	if err != nil {
		return nil, fmt.Errorf("reading own executable: %w", err)
	}
	defer f.Close()
	sum, err := hashFrom(f)
	if err != nil {
		return nil, fmt.Errorf("hashing own executable: %w", err)
	}
	return &image{sha256: sum, path: selfExe, release: func() {}}, nil
}

// loadImage copies the executable at path into a sealed memory file (no
// writes, no resizing, seals fixed), hashes the sealed copy, and returns
// it as an image a launch executes through /proc/self/fd/3: the copy is
// the launched process's fd 3. Only this process holds the memory file,
// and its seals keep even this process from changing it.
func loadImage(path string) (*image, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading plugin executable: %w", err)
	}
	defer src.Close()
	name := "gated-plugin-" + filepath.Base(path)
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) {
		// Kernels before 6.3 know no MFD_EXEC; their memory files are
		// executable without it.
		fd, err = unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil, fmt.Errorf("creating a sealed copy of the plugin executable: %w", err)
	}
	mem := os.NewFile(uintptr(fd), "memfd:"+name)
	fail := func(err error) (*image, error) {
		mem.Close()
		return nil, fmt.Errorf("copying the plugin executable into a sealed memory file: %w", err)
	}
	if _, err := io.Copy(mem, src); err != nil {
		return fail(err)
	}
	seals := unix.F_SEAL_WRITE | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(mem.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		return fail(fmt.Errorf("sealing: %w", err))
	}
	// The digest is of the sealed copy, read back: exactly what runs.
	st, err := mem.Stat()
	if err != nil {
		return fail(err)
	}
	sum, err := hashFrom(io.NewSectionReader(mem, 0, st.Size()))
	if err != nil {
		return fail(err)
	}
	return &image{sha256: sum, path: "/proc/self/fd/3", files: []*os.File{mem}, release: func() { mem.Close() }}, nil
}
