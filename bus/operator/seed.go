package operator

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// WriteSeed makes a user key pair, writes its seed into path (a new file,
// mode 0600) and returns the public key. A path that exists is an error
// matching os.ErrExist: a seed is never overwritten.
func WriteSeed(path string) (string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", fmt.Errorf("making an nkey: %w", err)
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return "", fmt.Errorf("making an nkey: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return "", fmt.Errorf("making an nkey: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("writing the seed: %w", err)
	}
	_, err = f.Write(append(seed, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path) // created above, and incomplete
		return "", fmt.Errorf("writing the seed to %s: %w", path, err)
	}
	return pub, nil
}

// ReadSeed reads an nkey user seed from path, warning on w when other
// users may read the file. Its errors never quote the file.
func ReadSeed(path string, w io.Writer) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--seed-file: %v", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(w, "gated: warning: --seed-file %s is readable by other users (mode %04o): chmod 600 it\n", path, st.Mode().Perm())
	}
	seed, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--seed-file: %v", err)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(seed)
	if err != nil {
		return nil, fmt.Errorf("--seed-file %s holds no nkey user seed (SU…): %v", path, err)
	}
	kp.Wipe()
	return seed, nil
}

// ParseCriteria reads --criterion values, ID=pass|fail[:reason] each,
// naming every criterion at most once.
func ParseCriteria(criteria []string) ([]engine.OperatorFinding, error) {
	var findings []engine.OperatorFinding
	for _, s := range criteria {
		f, err := parseCriterion(s)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(findings, func(g engine.OperatorFinding) bool { return g.ID == f.ID }) {
			return nil, fmt.Errorf("--criterion %s is given twice", f.ID)
		}
		findings = append(findings, f)
	}
	return findings, nil
}

// parseCriterion reads one --criterion ID=pass|fail[:reason].
func parseCriterion(s string) (engine.OperatorFinding, error) {
	id, rest, ok := strings.Cut(s, "=")
	if !ok {
		return engine.OperatorFinding{}, fmt.Errorf("--criterion %q: want ID=pass or ID=fail, with an optional :reason", s)
	}
	if !gated.ValidID(id) {
		return engine.OperatorFinding{}, fmt.Errorf("--criterion %q: id %q must match [A-Za-z0-9_-]{1,128}", s, id)
	}
	verdict, reason, _ := strings.Cut(rest, ":")
	f := engine.OperatorFinding{ID: id, Reason: strings.TrimSpace(reason)}
	switch verdict {
	case "pass":
		f.Pass = true
	case "fail":
	default:
		return engine.OperatorFinding{}, fmt.Errorf("--criterion %q: %q must be pass or fail", s, verdict)
	}
	if len(f.Reason) > MaxReasonBytes {
		return engine.OperatorFinding{}, fmt.Errorf("--criterion %s: the reason is %d bytes, more than %d", id, len(f.Reason), MaxReasonBytes)
	}
	return f, nil
}

// MatchAwaited checks that findings judge exactly the awaited criteria.
func MatchAwaited(awaited []string, findings []engine.OperatorFinding) error {
	given := map[string]bool{}
	for _, f := range findings {
		given[f.ID] = true
		if !slices.Contains(awaited, f.ID) {
			return fmt.Errorf("--criterion %s: the verdict does not await it; it awaits %s", f.ID, strings.Join(awaited, ", "))
		}
	}
	var missing []string
	for _, id := range awaited {
		if !given[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the verdict awaits %s: give --criterion ID=pass|fail[:reason] for %s too", strings.Join(awaited, ", "), strings.Join(missing, ", "))
	}
	return nil
}
