package jsonscan

// MaxDepth is encoding/json's limit on nested arrays and objects, which
// Value and Valid keep too.
const MaxDepth = 10000

// Valid reports whether data is one valid JSON value with optional white
// space around it, exactly as encoding/json's Valid does, in one pass.
func Valid(data []byte) bool {
	end := Value(data, Space(data, 0))
	return end >= 0 && Space(data, end) == len(data)
}

// Space returns where the JSON white space that starts at data[i] ends.
func Space(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// Value checks the one JSON value that starts at data[i] (no white space
// before it) and returns where it ends, or -1. What follows the value is
// not looked at.
func Value(data []byte, i int) int {
	// stack holds, for each open array or object, the byte that closes it.
	var buf [64]byte
	stack := buf[:0]
	for {
		// A value starts at i.
		if i >= len(data) || i < 0 {
			return -1
		}
		switch c := data[i]; {
		case c == '{' || c == '[':
			if len(stack) == MaxDepth {
				return -1
			}
			closer := byte(']')
			if c == '{' {
				closer = '}'
			}
			stack = append(stack, closer)
			i = Space(data, i+1)
			if i < len(data) && data[i] == closer {
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				if i = key(data, i); i < 0 {
					return -1
				}
			}
			continue
		case c == '"':
			if i = String(data, i); i < 0 {
				return -1
			}
		case c == 't':
			if i = Literal(data, i, "true"); i < 0 {
				return -1
			}
		case c == 'f':
			if i = Literal(data, i, "false"); i < 0 {
				return -1
			}
		case c == 'n':
			if i = Literal(data, i, "null"); i < 0 {
				return -1
			}
		default:
			if i = Number(data, i); i < 0 {
				return -1
			}
		}
		// A value ended before i: close what it ends, or go on to the
		// next member or element.
		for {
			if len(stack) == 0 {
				return i
			}
			i = Space(data, i)
			if i >= len(data) {
				return -1
			}
			closer := stack[len(stack)-1]
			if data[i] == closer {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if data[i] != ',' {
				return -1
			}
			i = Space(data, i+1)
			if closer == '}' {
				if i = key(data, i); i < 0 {
					return -1
				}
			}
			break
		}
	}
}

// key checks a member's key and its colon at data[i:], and returns where
// the member's value starts (past white space), or -1.
func key(data []byte, i int) int {
	if i = String(data, i); i < 0 {
		return -1
	}
	i = Space(data, i)
	if i >= len(data) || data[i] != ':' {
		return -1
	}
	return Space(data, i+1)
}

// String checks the string that starts with the quote at data[i], and
// returns where it ends (past its closing quote), or -1. Its escapes are
// checked, not decoded; bytes outside ASCII are taken as they come.
func String(data []byte, i int) int {
	if i < 0 || i >= len(data) || data[i] != '"' {
		return -1
	}
	for i++; i < len(data); i++ {
		// Most bytes of a string are plain: step over them first.
		for i < len(data) && plain[data[i]] {
			i++
		}
		if i >= len(data) {
			return -1
		}
		switch c := data[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			i++
			if i >= len(data) {
				return -1
			}
			switch data[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(data) {
					return -1
				}
				for _, h := range data[i+1 : i+5] {
					if !isHex(h) {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

// plain holds the bytes a string takes as they are: all but the quote,
// the backslash and the control characters.
var plain = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// Literal checks that data[i:] starts with lit (true, false or null) and
// returns where it ends, or -1.
func Literal(data []byte, i int, lit string) int {
	if i < 0 || len(data)-i < len(lit) || string(data[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// Number checks the number at data[i:]
// (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?) and returns where it
// ends, or -1.
func Number(data []byte, i int) int {
	if i < 0 {
		return -1
	}
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i >= len(data):
		return -1
	case data[i] == '0':
		i++
	case data[i] >= '1' && data[i] <= '9':
		i = Digits(data, i+1)
	default:
		return -1
	}
	if i < len(data) && data[i] == '.' {
		j := Digits(data, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		j := Digits(data, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

// Digits returns where the run of ASCII digits that starts at data[i]
// ends; i itself when there is none.
func Digits(data []byte, i int) int {
	for i < len(data) && data[i] >= '0' && data[i] <= '9' {
		i++
	}
	return i
}

// PlainString checks that the string which starts with the quote at
// data[i] is printable ASCII with no escape, which a caller may compare
// or copy as bytes, and returns where it ends (past its closing quote),
// or -1 for any other string, valid or not.
func PlainString(data []byte, i int) int {
	if i < 0 || i >= len(data) || data[i] != '"' {
		return -1
	}
	for i++; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			return i + 1
		case c < 0x20 || c > 0x7e || c == '\\':
			return -1
		}
	}
	return -1
}
