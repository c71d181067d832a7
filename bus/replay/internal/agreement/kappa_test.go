package agreement_test

import (
	"math/big"
	"strings"
	"testing"

	"github.com/gated/gated/bus/replay/internal/agreement"
)

// fill adds n pairs (a, b) to t.
func fill(t *agreement.Table, a, b string, n int) {
	for range n {
		t.Add(a, b)
	}
}

// TestKappa checks Cohen's kappa against tables worked by hand.
func TestKappa(t *testing.T) {
	type cell struct {
		a, b string
		n    int
	}
	tests := []struct {
		note      string
		cells     []cell
		want      string // the exact kappa; "" when undefined
		agreed    int
		flipRate  string
		undefined string // a fragment of the reason, when undefined
	}{
		{
			// 50 pairs: 20 approve/approve, 5 approve/reject, 10
			// reject/approve, 15 reject/reject. po = 35/50 = 7/10; the
			// recorded side approves 25/50, the candidate 30/50, so
			// pe = (25*30 + 25*20)/50² = 1250/2500 = 1/2 and
			// kappa = (7/10 - 1/2)/(1 - 1/2) = 2/5.
			note: "two categories",
			cells: []cell{{"approve", "approve", 20}, {"approve", "reject", 5},
				{"reject", "approve", 10}, {"reject", "reject", 15}},
			want: "2/5", agreed: 35, flipRate: "3/10",
		},
		{
			// 30 pairs over four categories. Diagonal 8+6+4 = 18, so
			// po = 18/30. Rows (recorded) approve 10, reject 12, error 8,
			// timeout 0; columns (candidate) approve 12, reject 10,
			// error 6, timeout 2. sum row*col = 120 + 120 + 48 + 0 = 288;
			// N² = 900. kappa = (30*18 - 288)/(900 - 288) = 252/612 = 7/17.
			note: "an error category of its own",
			cells: []cell{{"approve", "approve", 8}, {"approve", "reject", 2},
				{"reject", "approve", 4}, {"reject", "reject", 6}, {"reject", "error", 2},
				{"error", "reject", 2}, {"error", "error", 4}, {"error", "approve", 0}, {"error", "timeout", 2}},
			want: "7/17", agreed: 18, flipRate: "2/5",
		},
		{
			note:  "perfect agreement over two categories",
			cells: []cell{{"approve", "approve", 3}, {"reject", "reject", 2}},
			want:  "1", agreed: 5, flipRate: "0",
		},
		{
			// Both sides say approve every time: pe = 1, and kappa is
			// 0/0. It is reported undefined, never as a number.
			note:   "expected agreement of one",
			cells:  []cell{{"approve", "approve", 7}},
			agreed: 7, flipRate: "0",
			undefined: "expected agreement is 1",
		},
		{
			note:      "no pairs",
			flipRate:  "0",
			undefined: "no reviews",
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			var tab agreement.Table
			for _, c := range tc.cells {
				fill(&tab, c.a, c.b, c.n)
			}
			if tab.Agreed() != tc.agreed {
				t.Errorf("agreed %d, want %d", tab.Agreed(), tc.agreed)
			}
			if got := tab.FlipRate().RatString(); got != tc.flipRate {
				t.Errorf("flip rate %s, want %s", got, tc.flipRate)
			}
			k, err := tab.Kappa()
			if tc.undefined != "" {
				if err == nil || !strings.Contains(err.Error(), tc.undefined) {
					t.Fatalf("kappa %v, err %v; want undefined: %q", k, err, tc.undefined)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			w, _ := new(big.Rat).SetString(tc.want)
			if k.Cmp(w) != 0 {
				t.Errorf("kappa %s, want %s", k.RatString(), tc.want)
			}
		})
	}
}

// TestTableCells: the table counts each pair in its cell and lists the
// categories either side used.
func TestTableCells(t *testing.T) {
	var tab agreement.Table
	fill(&tab, "approve", "reject", 2)
	fill(&tab, "timeout", "timeout", 1)
	if tab.N() != 3 || tab.Count("approve", "reject") != 2 || tab.Count("reject", "approve") != 0 {
		t.Errorf("N %d, approve->reject %d, reject->approve %d", tab.N(), tab.Count("approve", "reject"), tab.Count("reject", "approve"))
	}
	if got := tab.Categories(); len(got) != 3 || got[0] != "approve" || got[1] != "reject" || got[2] != "timeout" {
		t.Errorf("categories %v, want approve, reject, timeout", got)
	}
}
