package bench

import (
	"os"
	"path/filepath"
	"time"
)

// StreamDiskBytes is what a stream's message blocks take on disk in the
// JetStream store of an embedded server whose --data-dir is dataDir, in
// every account; -1 if it cannot be read.
func StreamDiskBytes(dataDir, stream string) int64 {
	dirs, err := filepath.Glob(filepath.Join(dataDir, "jetstream", "*", "streams", stream, "msgs"))
	if err != nil || len(dirs) == 0 {
		return -1
	}
	var total int64
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			return -1
		}
		for _, e := range entries {
			if !e.Type().IsRegular() {
				continue
			}
			info, err := e.Info()
			switch {
			case os.IsNotExist(err):
				// Removed since the listing: the server compresses a
				// block into a new file and renames it.
			case err != nil:
				return -1
			default:
				total += info.Size()
			}
		}
	}
	return total
}

// SettledDiskBytes reads StreamDiskBytes until two readings interval
// apart agree, at most until wait has passed: the server compresses a
// full block in the background after the next one is begun.
func SettledDiskBytes(dataDir, stream string, interval, wait time.Duration) int64 {
	last := StreamDiskBytes(dataDir, stream)
	for end := time.Now().Add(wait); time.Now().Before(end); {
		time.Sleep(interval)
		n := StreamDiskBytes(dataDir, stream)
		if n == last {
			break
		}
		last = n
	}
	return last
}
