package gated

import "github.com/gobwas/glob"

// ActionWordSeparators separate the words of an action name: "_" as in
// host_restart_service, and "-" as in deploy_blue-green. A reader takes
// rotate_db-then-drop-all_credentials for five words between rotate and
// credentials, so a * that matched a "-" would stretch as far as one that
// matched a "_".
const ActionWordSeparators = "_-"

// MatchAction reports whether an action pattern matches action the way
// the policy's action_pattern_matches does, for every setting that lets an
// action through or eases its review (SOP coverage, skip_review_actions,
// persona_routes, reviewer_overrides): a * matches within one word of the
// action (words are separated by "_" or "-", see ActionWordSeparators),
// ? one character of a word, ** any number of words, and [...]
// and {a,b} as in glob.match. A pattern that does not compile matches
// nothing; the default bundle's config_errors refuses policy data with
// such a pattern, or an empty one, before anything matches with it.
//
// The policy and the SOP reviewer must agree on what an SOP covers: a *
// that also matched "_" would let rotate_*_credentials cover
// rotate_db_credentials_then_drop_all_credentials. Both sides are tested
// on the same cases (policies/testdata/action_patterns.json).
func MatchAction(pattern, action string) bool {
	g, err := glob.Compile(pattern, []rune(ActionWordSeparators)...)
	if err != nil {
		return false
	}
	return g.Match(action)
}

// Covers reports whether one of the SOP's action patterns matches action
// (see MatchAction).
func (s *SOP) Covers(action string) bool {
	if s == nil {
		return false
	}
	for _, pattern := range s.Actions {
		if MatchAction(pattern, action) {
			return true
		}
	}
	return false
}

// SOP is one entry of the standard operating procedure catalog.
type SOP struct {
	ID       string   `json:"id"`
	Title    string   `json:"title,omitempty"`
	Actions  []string `json:"actions,omitempty"`
	Rollback string   `json:"rollback,omitempty"`
	Steps    []string `json:"steps,omitempty"`
}
