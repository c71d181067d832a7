package replay

import "errors"

// ErrUnknownPersona is wrapped by NewRereviewer's error for a persona the
// candidate set does not hold: add its file to the candidate's personas,
// or name one of them.
var ErrUnknownPersona = errors.New("no such persona in the candidate set")

// errNoPlugins is why recorded reviews are stale, and a re-review
// refused, when ReviewersConfig names no Plugins.
var errNoPlugins = errors.New("no reviewer plugins configured for the candidate")
