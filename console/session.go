package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"

	"github.com/gated/gated/bus/operator"
)

// Bounds of the sign-in state kept in memory.
const (
	// challengeTTL is how long a challenge may be answered.
	challengeTTL = 2 * time.Minute
	// maxChallenges bounds the challenges waiting for an answer; past it,
	// GET /api/challenge answers 503 until some expire.
	maxChallenges = 10000
	// maxSessions bounds the live sessions.
	maxSessions = 10000
	// cookieName is the session cookie's name.
	cookieName = "gated_session"
)

// session is a signed-in operator.
type session struct {
	op      operator.Signer
	expires time.Time
}

// sessions keeps the challenges handed out and the sessions of signed-in
// operators, in memory: a restart signs everyone out.
type sessions struct {
	mu         sync.Mutex
	challenges map[string]time.Time // challenge -> expiry
	// live maps the SHA-256 of a session token to its session: a look-up
	// by the digest tells a guesser nothing about the tokens by its
	// timing, and the tokens themselves are not kept.
	live map[[32]byte]session
	ttl  time.Duration
	now  func() time.Time
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{challenges: map[string]time.Time{}, live: map[[32]byte]session{}, ttl: ttl, now: now}
}

// randomToken returns n random bytes in base64 (raw URL alphabet).
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// challenge hands out a new challenge, or "" when too many wait.
func (s *sessions) challenge() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked()
	if len(s.challenges) >= maxChallenges {
		return ""
	}
	c := randomToken(challengeBytes)
	s.challenges[c] = s.now().Add(challengeTTL)
	return c
}

// takeChallenge uses c up: it reports whether c was handed out and has
// not expired, and it can never be used again.
func (s *sessions) takeChallenge(c string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.challenges[c]
	delete(s.challenges, c)
	return ok && s.now().Before(exp)
}

// start opens a session for op and returns its token and expiry, or ""
// when too many sessions are live.
func (s *sessions) start(op operator.Signer) (string, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked()
	if len(s.live) >= maxSessions {
		return "", time.Time{}
	}
	tok := randomToken(32)
	exp := s.now().Add(s.ttl)
	s.live[sha256.Sum256([]byte(tok))] = session{op: op, expires: exp}
	return tok, exp
}

// get returns the live session of token.
func (s *sessions) get(token string) (session, bool) {
	if token == "" {
		return session{}, false
	}
	h := sha256.Sum256([]byte(token))
	s.mu.Lock()
	defer s.mu.Unlock()
	ses, ok := s.live[h]
	if !ok {
		return session{}, false
	}
	if !s.now().Before(ses.expires) {
		delete(s.live, h)
		return session{}, false
	}
	return ses, true
}

// end closes the session of token.
func (s *sessions) end(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.live, sha256.Sum256([]byte(token)))
}

func (s *sessions) pruneLocked() {
	now := s.now()
	for c, exp := range s.challenges {
		if !now.Before(exp) {
			delete(s.challenges, c)
		}
	}
	for h, ses := range s.live {
		if !now.Before(ses.expires) {
			delete(s.live, h)
		}
	}
}
