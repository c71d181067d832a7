package grant

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
)

// Canonicalize returns the RFC 8785 (JCS) canonical form of the JSON
// document data: members sorted by the UTF-16 code units of their names,
// no white space, strings with the minimal escapes, numbers as ECMAScript
// writes a double. It refuses, with an error that says why, what JCS
// cannot represent: invalid UTF-8, unpaired surrogates, duplicate member
// names, and numbers outside the IEEE-754 double range.
func Canonicalize(data []byte) ([]byte, error) {
	v, err := parseJSON(data)
	if err != nil {
		return nil, fmt.Errorf("canonicalising JSON: %w", err)
	}
	var b bytes.Buffer
	if err := writeCanonical(&b, v); err != nil {
		return nil, fmt.Errorf("canonicalising JSON: %w", err)
	}
	return b.Bytes(), nil
}

// TargetSHA256 is the digest a grant binds a proposal's target with: the
// lowercase hex SHA-256 of the target's canonical JSON (Canonicalize). A
// proposal without a target (target empty, or JSON null) is digested as
// the empty object, {}.
func TargetSHA256(target []byte) (string, error) {
	if t := bytes.TrimSpace(target); len(t) == 0 || string(t) == "null" {
		target = []byte("{}")
	}
	c, err := Canonicalize(target)
	if err != nil {
		return "", fmt.Errorf("digesting the target: %w", err)
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

func writeCanonical(b *bytes.Buffer, v *value) error {
	switch v.kind {
	case kindNull:
		b.WriteString("null")
	case kindBool:
		b.WriteString(strconv.FormatBool(v.boolean))
	case kindString:
		writeString(b, v.text)
	case kindNumber:
		s, err := canonicalNumber(v.text)
		if err != nil {
			return err
		}
		b.WriteString(s)
	case kindArray:
		b.WriteByte('[')
		for i, item := range v.items {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeCanonical(b, item); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case kindObject:
		members := slices.Clone(v.members)
		slices.SortFunc(members, func(x, y member) int { return compareUTF16(x.name, y.name) })
		b.WriteByte('{')
		for i, m := range members {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, m.name)
			b.WriteByte(':')
			if err := writeCanonical(b, m.val); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	}
	return nil
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785
// §3.2.3 sorts member names.
func compareUTF16(x, y string) int {
	return slices.Compare(utf16.Encode([]rune(x)), utf16.Encode([]rune(y)))
}

// writeString writes s as RFC 8785 §3.2.2.2 does: '"' and '\' escaped,
// the control characters as \b \t \n \f \r or \u00xx, the rest as is.
func writeString(b *bytes.Buffer, s string) {
	const hexDigits = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\f':
			b.WriteString(`\f`)
		case c == '\r':
			b.WriteString(`\r`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// canonicalNumber writes the JSON number literal lit as ECMAScript's
// Number.prototype.toString writes the nearest double (RFC 8785
// §3.2.2.3). A literal beyond the double range is refused: JCS has no
// spelling for it.
func canonicalNumber(lit string) (string, error) {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", fmt.Errorf("number %s is outside the IEEE-754 double range that canonical JSON can write", clip(lit))
	}
	return FormatNumber(f), nil
}

// FormatNumber writes f as ECMAScript's Number.prototype.toString does
// (ECMA-262 Number::toString, the number rule of RFC 8785): the shortest
// digits that read back as f, in plain notation for exponents from -7 to
// 20 and in exponent notation otherwise; -0 is "0". f must be finite.
func FormatNumber(f float64) string {
	if f == 0 {
		return "0"
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	// The shortest round-tripping digits and their exponent: d.ddd e±x.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, exp, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	x, _ := strconv.Atoi(exp)
	k, n := len(digits), x+1 // value = 0.digits × 10^n
	var s string
	switch {
	case k <= n && n <= 21:
		s = digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		s = digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		s = "0." + strings.Repeat("0", -n) + digits
	default:
		s = digits[:1]
		if k > 1 {
			s += "." + digits[1:]
		}
		if n-1 >= 0 {
			s += "e+" + strconv.Itoa(n-1)
		} else {
			s += "e-" + strconv.Itoa(1-n)
		}
	}
	return sign + s
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
