package intake

import (
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
)

// FuzzHoldTokens: a hold subject is read back to the tenant and id it was
// made of, and anything else yields valid tokens or nothing.
func FuzzHoldTokens(f *testing.F) {
	f.Add("acme", "p-1")
	f.Add("_", "p")
	f.Add("acme.x", "p")
	f.Add("acme", "p.q")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, tenant, id string) {
		gotTenant, gotID, ok := holdTokens(bus.HoldSubject(tenant, id))
		valid := gated.ValidTenant(tenant) && gated.ValidID(id)
		if valid && (!ok || gotTenant != tenant || gotID != id) {
			t.Fatalf("HoldSubject(%q, %q) read back as %q, %q, %v", tenant, id, gotTenant, gotID, ok)
		}
		if ok && (!gated.ValidTenant(gotTenant) || !gated.ValidID(gotID)) {
			t.Fatalf("read invalid tokens %q, %q", gotTenant, gotID)
		}
	})
}
