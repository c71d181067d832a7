//go:build unix

package bus

import (
	"errors"
	"os"
	"syscall"
)

// lockFile takes f's exclusive flock without waiting. held is true when
// another open file holds it. The lock belongs to the open file, so a
// second LockDataDir in the same process is refused as well.
func lockFile(f *os.File) (held bool, err error) {
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return false, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return true, nil
		case errors.Is(err, syscall.EINTR):
			continue
		}
		return false, err
	}
}
