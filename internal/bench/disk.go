package bench

import (
	"io/fs"
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
		err := filepath.WalkDir(d, func(_ string, e fs.DirEntry, err error) error {
			if err != nil {
				// A block removed or renamed while walking (the server
				// compresses into a new file and renames it).
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			if !e.Type().IsRegular() {
				return nil
			}
			info, err := e.Info()
			if os.IsNotExist(err) {
				return nil
			}
			if err != nil {
				return err
			}
			total += info.Size()
			return nil
		})
		if err != nil {
			return -1
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
