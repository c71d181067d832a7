package bus

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
)

// ErrInvalidConfig is wrapped by the errors of Setup, NewWorker,
// StartService, StartEmbedded and LockDataDir about their configuration.
var ErrInvalidConfig = errors.New("invalid bus configuration")

// ErrDataDirInUse is wrapped by the error of LockDataDir when another
// process holds the directory: two embedded servers on one store rebuild
// each other's files and lose records.
var ErrDataDirInUse = errors.New("the data directory is in use")

// DataDirInUseError says which process holds a data directory.
type DataDirInUseError struct {
	// Dir is the data directory.
	Dir string
	// PID is the holder's process id; 0 when it has not written it yet.
	PID int
}

// Error names the directory, the holder's pid and the lock file.
func (e *DataDirInUseError) Error() string {
	holder := "another process (its pid is not written yet)"
	if e.PID > 0 {
		holder = "another process, pid " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("the data directory %s is in use by %s (it holds %s)", e.Dir, holder, filepath.Join(e.Dir, DataDirLockFile))
}

// Unwrap makes the error match ErrDataDirInUse.
func (e *DataDirInUseError) Unwrap() error { return ErrDataDirInUse }
