package bus

import (
	"strconv"
	"testing"
)

// FuzzParseLockHolder feeds parseLockHolder arbitrary lock file contents:
// it never panics, and it returns a positive pid that reads back the same,
// or 0.
func FuzzParseLockHolder(f *testing.F) {
	for _, s := range []string{"", "1234\n", " 42 ", "0", "-7", "abc", "99999999999999999999", "12\n34", "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pid := parseLockHolder(data)
		if pid < 0 {
			t.Fatalf("parseLockHolder(%q) = %d", data, pid)
		}
		if pid > 0 && parseLockHolder([]byte(strconv.Itoa(pid)+"\n")) != pid {
			t.Fatalf("pid %d does not read back", pid)
		}
	})
}
