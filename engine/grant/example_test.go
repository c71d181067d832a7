package grant_test

import (
	"fmt"

	"github.com/gated/gated/engine/grant"
)

// The same target however it is spelled has one canonical form, and so
// one digest.
func ExampleCanonicalize() {
	for _, target := range []string{
		`{"service": "nginx", "device_id": 7}`,
		`{"device_id":7.0,"service":"ngin\u0078"}`,
	} {
		c, err := grant.Canonicalize([]byte(target))
		if err != nil {
			fmt.Println(err)
			continue
		}
		d, _ := grant.TargetSHA256([]byte(target))
		fmt.Println(string(c), d[:16])
	}
	_, err := grant.Canonicalize([]byte(`{"n":1e400}`))
	fmt.Println(err)
	// Output:
	// {"device_id":7,"service":"nginx"} 5f43c9c462d48679
	// {"device_id":7,"service":"nginx"} 5f43c9c462d48679
	// canonicalising JSON: number 1e400 is outside the IEEE-754 double range that canonical JSON can write
}
