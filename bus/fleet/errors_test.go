package fleet_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gated/gated/bus/fleet"
)

func TestServiceErrorMatchesItsSentinel(t *testing.T) {
	sentinels := []error{fleet.ErrBadProposal, fleet.ErrTenantMismatch, fleet.ErrIDReused, fleet.ErrServiceUnavailable, fleet.ErrNoVerdict}
	for _, tc := range []struct {
		code int
		is   error // nil: no sentinel
	}{
		{400, fleet.ErrBadProposal}, {413, fleet.ErrBadProposal}, {403, fleet.ErrTenantMismatch},
		{409, fleet.ErrIDReused}, {503, fleet.ErrServiceUnavailable}, {504, fleet.ErrNoVerdict},
		{500, nil}, {404, nil},
	} {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			err := error(&fleet.ServiceError{Code: tc.code, Description: "x"})
			for _, s := range sentinels {
				if got := errors.Is(err, s); got != (s == tc.is) {
					t.Errorf("errors.Is(%d, %v) = %v", tc.code, s, got)
				}
			}
		})
	}
}
