// Package digest checks the SHA-256 digests gated writes and reads as
// text: plugin pins, lock-file entries and the proposal digest an operator
// signs. Every such check goes through ValidSHA256 so that all of them
// accept the same spelling.
package digest

import (
	"crypto/sha256"
	"encoding/hex"
)

// SHA256Len is the length of a SHA-256 digest written in hex.
const SHA256Len = 2 * sha256.Size

// ValidSHA256 reports whether s is a SHA-256 digest as SHA256 writes it:
// exactly 64 lower-case hex digits. Callers that accept upper case from a
// person lower-case the text first.
func ValidSHA256(s string) bool {
	if len(s) != SHA256Len {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// SHA256 is the SHA-256 digest of data in lower-case hex.
func SHA256(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
