package replay

import "encoding/json"

// The functions below cut valid JSON into its members and items without
// decoding it, for the one-pass readings of onepass.go.

// jsonItems calls fn with each item of the JSON array data, in order,
// while fn returns true. data must be valid JSON; ok is false when it is
// not an array or fn returns false.
func jsonItems(data []byte, fn func(item []byte) bool) (ok bool) {
	return jsonList(data, '[', ']', func(i int) (int, bool) {
		end := skipValue(data, i)
		return end, end > i && fn(data[i:end])
	})
}

// jsonList walks the JSON object or array data, which opens with open
// and closes with close: read reads the member or item at data[i] and
// returns where it ends, or false to stop. ok is false when data is not
// such a document or read stopped.
func jsonList(data []byte, open, close byte, read func(i int) (end int, ok bool)) (ok bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != open {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == close {
		return skipSpace(data, i+1) == len(data)
	}
	for i < len(data) {
		end, ok := read(i)
		if !ok {
			return false
		}
		i = skipSpace(data, end)
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case close:
			return skipSpace(data, i+1) == len(data)
		default:
			return false
		}
	}
	return false
}

// decodeString reads the JSON value val into *to as encoding/json does:
// a string of printable ASCII without escapes directly, anything else
// (escapes, other bytes, null, another type) through encoding/json.
func decodeString(val []byte, to *string) bool {
	if n := len(val); n >= 2 && val[0] == '"' && val[n-1] == '"' {
		plain := true
		for _, c := range val[1 : n-1] {
			if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
				plain = false
				break
			}
		}
		if plain {
			*to = string(val[1 : n-1])
			return true
		}
	}
	return json.Unmarshal(val, to) == nil
}

// jsonMembers calls fn with the key and the raw value of each member of
// the JSON object data, in order, while fn returns true. data must be
// valid JSON. ok is false when data is not an object, when a key holds an
// escape or a byte outside printable ASCII, or when fn returns false.
func jsonMembers(data []byte, fn func(key []byte, val []byte) bool) (ok bool) {
	return jsonList(data, '{', '}', func(i int) (int, bool) {
		if data[i] != '"' {
			return 0, false
		}
		start := i + 1
		for i = start; i < len(data) && data[i] != '"'; i++ {
			if c := data[i]; c < 0x20 || c > 0x7e || c == '\\' {
				return 0, false
			}
		}
		if i >= len(data) {
			return 0, false
		}
		key := data[start:i]
		i = skipSpace(data, i+1)
		if i >= len(data) || data[i] != ':' {
			return 0, false
		}
		i = skipSpace(data, i+1)
		end := skipValue(data, i)
		return end, end > i && fn(key, data[i:end])
	})
}

// skipValue returns where the valid JSON value at data[i:] ends.
func skipValue(data []byte, i int) int {
	if i >= len(data) {
		return i
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				i = skipString(data, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(data) {
		switch data[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
		i++
	}
	return i
}

// skipString returns where the string starting at data[i] ends, past its
// closing quote.
func skipString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}
