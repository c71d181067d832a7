//go:build !unix

package bus

import (
	"fmt"
	"os"
	"runtime"
)

// lockFile refuses: without a lock, two servers could share a store and
// lose records, so the embedded server is not started here.
func lockFile(*os.File) (bool, error) {
	return false, fmt.Errorf("locking a data directory is not supported on %s: use an external NATS server", runtime.GOOS)
}
