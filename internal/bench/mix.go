package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// Mix is the share of each path in a run, as whole-number weights.
type Mix map[Path]int

// ParseMix reads "denied=2,read=2,plugin=1": a weight per path, at least
// one of them positive. A path left out has weight 0.
func ParseMix(s string) (Mix, error) {
	m := Mix{}
	if err := parsePairs(s, "mix", func(p Path, n int) { m[p] = n }); err != nil {
		return nil, err
	}
	if m.total() == 0 {
		return nil, fmt.Errorf("mix %q gives every path weight 0; give at least one a positive weight, e.g. denied=1,read=1", s)
	}
	return m, nil
}

func (m Mix) total() int {
	n := 0
	for _, w := range m {
		n += w
	}
	return n
}

// Split shares n proposals out by weight, largest remainder first, so the
// counts add up to n exactly.
func (m Mix) Split(n int) map[Path]int {
	total := m.total()
	out := map[Path]int{}
	if total == 0 || n <= 0 {
		return out
	}
	type rem struct {
		p Path
		r int
	}
	var rems []rem
	given := 0
	for _, p := range Paths {
		w := m[p]
		if w <= 0 {
			continue
		}
		out[p] = n * w / total
		given += out[p]
		rems = append(rems, rem{p, n * w % total})
	}
	for given < n {
		best := 0
		for i := range rems {
			if rems[i].r > rems[best].r {
				best = i
			}
		}
		out[rems[best].p]++
		rems[best].r = -1
		given++
	}
	return out
}

// Concurrency is the number of proposals each path keeps in flight.
type Concurrency map[Path]int

// ParseConcurrency reads either one number, shared out over the mix's
// paths by weight (each at least 1), or a number per path:
// "llm=2000,read=8". A path of the mix with no number of its own gets 1.
func ParseConcurrency(s string, m Mix) (Concurrency, error) {
	c := Concurrency{}
	if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil {
		if n < 1 {
			return nil, fmt.Errorf("concurrency %d must be at least 1", n)
		}
		total := m.total()
		for _, p := range Paths {
			if m[p] > 0 {
				c[p] = max(1, n*m[p]/total)
			}
		}
		return c, nil
	}
	if err := parsePairs(s, "concurrency", func(p Path, n int) { c[p] = n }); err != nil {
		return nil, err
	}
	for p, n := range c {
		if n < 1 && m[p] > 0 {
			return nil, fmt.Errorf("concurrency of %s is %d; a path of the mix needs at least 1", p, n)
		}
	}
	for _, p := range Paths {
		if m[p] > 0 && c[p] == 0 {
			c[p] = 1
		}
	}
	return c, nil
}

// Total is the proposals in flight over every path.
func (c Concurrency) Total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// parsePairs reads "path=n,path=n" with n a whole number from 0 to 1e6.
func parsePairs(s, what string, set func(Path, int)) error {
	if strings.TrimSpace(s) == "" {
		return fmt.Errorf("%s is empty; want path=number pairs such as denied=1,read=1", what)
	}
	seen := map[Path]bool{}
	for part := range strings.SplitSeq(s, ",") {
		name, num, ok := strings.Cut(part, "=")
		if !ok {
			return fmt.Errorf("%s entry %q: want path=number", what, part)
		}
		p, err := parsePath(name)
		if err != nil {
			return fmt.Errorf("%s entry %q: %w", what, part, err)
		}
		if seen[p] {
			return fmt.Errorf("%s entry %q: path %s is given twice", what, part, p)
		}
		seen[p] = true
		n, err := strconv.Atoi(strings.TrimSpace(num))
		if err != nil || n < 0 || n > 1_000_000 {
			return fmt.Errorf("%s entry %q: %q is not a whole number from 0 to 1000000", what, part, num)
		}
		set(p, n)
	}
	return nil
}

// MaxPrefill bounds one prefill: ten million proposals' histories.
const MaxPrefill = 10_000_000

// ParseSizes reads a prefill curve, "0,100000,1000000": up to 16 sizes,
// each a whole number from 0 to MaxPrefill, none given twice, in the
// order given.
func ParseSizes(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 || n > MaxPrefill || part != strconv.Itoa(n) {
			return nil, fmt.Errorf("prefill size %q is not a whole number from 0 to %d", part, MaxPrefill)
		}
		for _, m := range out {
			if m == n {
				return nil, fmt.Errorf("prefill size %d is given twice", n)
			}
		}
		out = append(out, n)
		if len(out) > 16 {
			return nil, fmt.Errorf("prefill curve %q has more than 16 sizes", s)
		}
	}
	return out, nil
}
