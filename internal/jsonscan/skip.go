package jsonscan

// SkipString returns where the string that starts with the quote at
// data[i] ends, past its closing quote, or -1 when data ends before the
// string closes. It assumes valid JSON otherwise: it steps over escapes
// without checking them, and takes any other byte as it comes.
func SkipString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// SkipValue returns where the valid JSON value that starts at data[i]
// ends.
func SkipValue(data []byte, i int) int {
	if i >= len(data) {
		return i
	}
	switch data[i] {
	case '"':
		if i = SkipString(data, i); i < 0 {
			return len(data)
		}
		return i
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				if i = SkipString(data, i); i < 0 {
					return len(data)
				}
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

// Items calls fn with each item of the JSON array data, in order, while
// fn returns true. data must be valid JSON; ok is false when it is not an
// array or fn returned false.
func Items(data []byte, fn func(item []byte) bool) (ok bool) {
	return list(data, '[', ']', func(i int) (int, bool) {
		end := SkipValue(data, i)
		return end, end > i && fn(data[i:end])
	})
}

// Members calls fn with the key (without its quotes) and the raw value of
// each member of the JSON object data, in order, while fn returns true.
// data must be valid JSON. ok is false when data is not an object, when a
// key holds an escape or a byte outside printable ASCII (which a caller
// comparing keys as bytes cannot take), or when fn returned false.
func Members(data []byte, fn func(key, val []byte) bool) (ok bool) {
	return list(data, '{', '}', func(i int) (int, bool) {
		end := PlainString(data, i)
		if end < 0 {
			return 0, false
		}
		key := data[i+1 : end-1]
		i = Space(data, end)
		if i >= len(data) || data[i] != ':' {
			return 0, false
		}
		i = Space(data, i+1)
		end = SkipValue(data, i)
		return end, end > i && fn(key, data[i:end])
	})
}

// list walks the JSON object or array data, which opens with open and
// closes with close: read reads the member or item at data[i] and returns
// where it ends, or false to stop. ok is false when data is not such a
// document or read stopped.
func list(data []byte, open, close byte, read func(i int) (end int, ok bool)) (ok bool) {
	i := Space(data, 0)
	if i >= len(data) || data[i] != open {
		return false
	}
	i = Space(data, i+1)
	if i < len(data) && data[i] == close {
		return Space(data, i+1) == len(data)
	}
	for i < len(data) {
		end, ok := read(i)
		if !ok {
			return false
		}
		i = Space(data, end)
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = Space(data, i+1)
		case close:
			return Space(data, i+1) == len(data)
		default:
			return false
		}
	}
	return false
}
