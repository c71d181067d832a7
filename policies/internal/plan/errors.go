package plan

import "errors"

// ErrUnsupported is wrapped by Compile's error when the query's plan uses
// what this interpreter does not run: `with`, a dynamic call into virtual
// documents, or a built-in outside the pure ones it allows. The caller then
// decides with topdown.
var ErrUnsupported = errors.New("plan not supported by the planned evaluator")
