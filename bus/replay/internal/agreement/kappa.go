// Package agreement measures how well two raters agree on the same items:
// a recorded reviewer and a candidate one, in gated's replays. It counts
// pairs of categories in a Table and computes the flip rate and Cohen's
// kappa exactly, as fractions, so that a figure never depends on the
// order in which the pairs were added.
package agreement

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
)

// ErrUndefined is returned by Table.Kappa when kappa is 0/0: the table is
// empty, or both sides gave one and the same category to every item, so
// the agreement expected by chance is already 1.
var ErrUndefined = errors.New("kappa is undefined")

// Table counts pairs of categories: the first rater's (a row) against the
// second's (a column). The zero Table is empty and ready to use. It is
// not safe for concurrent use.
type Table struct {
	cells map[[2]string]int
	rows  map[string]int
	cols  map[string]int
	n     int
}

// Add counts one item that the first rater put in category a and the
// second in b.
func (t *Table) Add(a, b string) {
	if t.cells == nil {
		t.cells, t.rows, t.cols = map[[2]string]int{}, map[string]int{}, map[string]int{}
	}
	t.cells[[2]string{a, b}]++
	t.rows[a]++
	t.cols[b]++
	t.n++
}

// N is the number of items counted.
func (t *Table) N() int { return t.n }

// Count is how many items the first rater put in a and the second in b.
func (t *Table) Count(a, b string) int { return t.cells[[2]string{a, b}] }

// Agreed is how many items both raters put in the same category.
func (t *Table) Agreed() int {
	n := 0
	for c, k := range t.cells {
		if c[0] == c[1] {
			n += k
		}
	}
	return n
}

// Categories lists every category either rater used, sorted.
func (t *Table) Categories() []string {
	var out []string
	for c := range t.rows {
		out = append(out, c)
	}
	for c := range t.cols {
		if _, ok := t.rows[c]; !ok {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// FlipRate is the share of items the raters disagree on; 0 for an empty
// table.
func (t *Table) FlipRate() *big.Rat {
	if t.n == 0 {
		return new(big.Rat)
	}
	return big.NewRat(int64(t.n-t.Agreed()), int64(t.n))
}

// Kappa is Cohen's kappa, (po - pe) / (1 - pe), where po is the observed
// agreement and pe the agreement expected by chance from each rater's
// category shares. Multiplied through by N², it is
// (N·agreed - Σ row·col) / (N² - Σ row·col), computed here in integers.
// It returns an error wrapping ErrUndefined when the denominator is 0: an
// empty table, or one where pe is 1 (both raters used a single, common
// category for every item; po is then 1 too, but kappa says nothing).
func (t *Table) Kappa() (*big.Rat, error) {
	if t.n == 0 {
		return nil, fmt.Errorf("%w: no reviews to compare", ErrUndefined)
	}
	n := big.NewInt(int64(t.n))
	chance := new(big.Int)
	for c, r := range t.rows {
		chance.Add(chance, new(big.Int).Mul(big.NewInt(int64(r)), big.NewInt(int64(t.cols[c]))))
	}
	num := new(big.Int).Sub(new(big.Int).Mul(n, big.NewInt(int64(t.Agreed()))), chance)
	den := new(big.Int).Sub(new(big.Int).Mul(n, n), chance)
	if den.Sign() == 0 {
		return nil, fmt.Errorf("%w: the expected agreement is 1: both sides gave every review the same single category", ErrUndefined)
	}
	return new(big.Rat).SetFrac(num, den), nil
}
