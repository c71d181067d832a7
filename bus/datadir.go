package bus

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"go.uber.org/zap"
)

// DataDirLockFile is the file in a data directory that LockDataDir locks.
// While the lock is held it holds the holder's pid.
const DataDirLockFile = "gated.lock"

// DataDirLock is the exclusive lock of a data directory, held until
// Release or the end of the process: the kernel drops it with the process,
// however it ends, so a crash leaves no stale lock.
type DataDirLock struct {
	f *os.File
}

// LockDataDir makes dir if it is missing, checks that it is a directory
// this process can write, and takes its exclusive lock without waiting.
// Every error names dir. When another process holds the lock, the error
// is a *DataDirInUseError naming its pid.
func LockDataDir(dir string) (*DataDirLock, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: no data directory", ErrInvalidConfig)
	}
	switch st, err := os.Stat(dir); {
	case err == nil && !st.IsDir():
		return nil, fmt.Errorf("the data directory %s is not a directory", dir)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("the data directory %s cannot be used: %w", dir, err)
	case err != nil:
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("creating the data directory %s: %w", dir, err)
		}
	}
	path := filepath.Join(dir, DataDirLockFile)
	// O_CLOEXEC (os.OpenFile's default) keeps the plugin processes gated
	// starts from inheriting the lock.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the data directory %s is not writable: %w", dir, err)
	}
	held, err := lockFile(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking the data directory %s: %w", dir, err)
	}
	if held {
		pid := lockHolder(f)
		f.Close()
		return nil, &DataDirInUseError{Dir: dir, PID: pid}
	}
	// The pid is for the error above; writing it is also the check that
	// the directory takes writes.
	if err := writeHolder(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("the data directory %s is not writable: writing %s: %w", dir, path, err)
	}
	return &DataDirLock{f: f}, nil
}

// Release drops the lock. It is safe to call more than once.
func (l *DataDirLock) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = l.f.Close() // closing the last descriptor drops the lock
	l.f = nil
}

func writeHolder(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		return err
	}
	return f.Sync()
}

// lockHolder reads the pid in a lock file; 0 when there is none.
func lockHolder(f *os.File) int {
	data, err := io.ReadAll(io.NewSectionReader(f, 0, 64))
	if err != nil {
		return 0
	}
	return parseLockHolder(data)
}

// parseLockHolder reads a lock file's content: a decimal pid and a line
// end. Anything else, a pid of 0 or below included, is 0: unknown.
func parseLockHolder(data []byte) int {
	pid, err := strconv.Atoi(string(bytes.TrimSpace(data)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// OpenDataDir serves the streams of the data directory dir, for a reader
// such as policy replay while no gated serves them,
// on an embedded server listening on a free local port, and
// returns its client URL and the function that shuts it down. The lock of
// dir keeps a gated off the files meanwhile.
func OpenDataDir(dir string) (url string, shutdown func(), err error) {
	lock, err := LockDataDir(dir)
	if err != nil {
		return "", nil, fmt.Errorf("%w: stop the gated that holds it, or replay through --nats-url", err)
	}
	s, err := StartEmbedded(EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: dir}, zap.NewNop())
	if err != nil {
		lock.Release()
		return "", nil, fmt.Errorf("opening the data dir %s: %w", dir, err)
	}
	return s.ClientURL(), func() { s.Shutdown(); s.WaitForShutdown(); lock.Release() }, nil
}
