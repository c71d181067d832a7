package audit

// validJSON reports whether data is one valid JSON value, exactly as
// encoding/json's Valid does (the same grammar, bytes outside ASCII taken
// as they come inside strings, the same limit of 10,000 nested arrays and
// objects), in one pass with no allocation below 64 levels. Replay reads
// every record of its range, and checking the data member of each was
// about a twentieth of its CPU time with encoding/json's scanner, which
// steps a state machine through a function call per byte.
// FuzzValidJSON holds the two equal.
func validJSON(data []byte) bool {
	end := validValue(data, skipWhite(data, 0))
	return end >= 0 && skipWhite(data, end) == len(data)
}

// validValue checks the one JSON value that starts at data[i], as
// validJSON checks a document, and returns where it ends, or -1. What
// follows the value is not looked at.
func validValue(data []byte, i int) int {
	// stack holds, for each open array or object, the byte that closes it.
	var buf [64]byte
	stack := buf[:0]
	for {
		// A value starts at i.
		if i >= len(data) {
			return -1
		}
		switch c := data[i]; {
		case c == '{' || c == '[':
			if len(stack) == maxNesting {
				return -1
			}
			closer := byte(']')
			if c == '{' {
				closer = '}'
			}
			stack = append(stack, closer)
			i = skipWhite(data, i+1)
			if i < len(data) && data[i] == closer {
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				if i = validKey(data, i); i < 0 {
					return -1
				}
			}
			continue
		case c == '"':
			if i = validString(data, i); i < 0 {
				return -1
			}
		case c == 't':
			if i = validLiteral(data, i, "true"); i < 0 {
				return -1
			}
		case c == 'f':
			if i = validLiteral(data, i, "false"); i < 0 {
				return -1
			}
		case c == 'n':
			if i = validLiteral(data, i, "null"); i < 0 {
				return -1
			}
		default:
			if i = validNumber(data, i); i < 0 {
				return -1
			}
		}
		// A value ended before i: close what it ends, or go on to the
		// next member or element.
		for {
			if len(stack) == 0 {
				return i
			}
			i = skipWhite(data, i)
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
			i = skipWhite(data, i+1)
			if closer == '}' {
				if i = validKey(data, i); i < 0 {
					return -1
				}
			}
			break
		}
	}
}

// maxNesting is encoding/json's limit on nested arrays and objects.
const maxNesting = 10000

// validKey checks a member's key and its colon at data[i:], and returns
// where the member's value starts, or -1.
func validKey(data []byte, i int) int {
	if i >= len(data) || data[i] != '"' {
		return -1
	}
	if i = validString(data, i); i < 0 {
		return -1
	}
	i = skipWhite(data, i)
	if i >= len(data) || data[i] != ':' {
		return -1
	}
	return skipWhite(data, i+1)
}

// validString checks the string that starts with the quote at data[i],
// and returns where it ends (past its closing quote), or -1.
func validString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		// Most bytes of a string are plain: step over them first.
		for i < len(data) && plainInString[data[i]] {
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

// plainInString holds the bytes a string takes as they are: all but
// the quote, the backslash and the control characters.
var plainInString = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// validLiteral checks that data[i:] starts with lit, and returns where it
// ends, or -1.
func validLiteral(data []byte, i int, lit string) int {
	if len(data)-i < len(lit) || string(data[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// validNumber checks the number at data[i:] (-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?)
// and returns where it ends, or -1.
func validNumber(data []byte, i int) int {
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i >= len(data):
		return -1
	case data[i] == '0':
		i++
	case data[i] >= '1' && data[i] <= '9':
		i = skipDigits(data, i+1)
	default:
		return -1
	}
	if i < len(data) && data[i] == '.' {
		j := skipDigits(data, i+1)
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
		j := skipDigits(data, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func skipDigits(data []byte, i int) int {
	for i < len(data) && data[i] >= '0' && data[i] <= '9' {
		i++
	}
	return i
}

// skipWhite skips JSON's white space from data[i].
func skipWhite(data []byte, i int) int {
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
