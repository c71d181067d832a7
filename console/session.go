package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"sync"
	"time"

	"github.com/gated/gated/bus/operator"
)

// Bounds of the sign-in state kept in memory.
const (
	// challengeTTL is how long a challenge may be answered.
	challengeTTL = 2 * time.Minute
	// maxSessions bounds the live sessions.
	maxSessions = 10000
	// cookieName is the session cookie's name.
	cookieName = "gated_session"
)

// A challenge is challengeNonce random bytes, its expiry (Unix seconds,
// 8 bytes big-endian) and an HMAC-SHA256 of both under a key of the
// process: the console keeps no state for the challenges it hands out, so
// asking for many costs it nothing, and only a challenge it made, answered
// in time, signs anyone in. A challenge that signed someone in is
// remembered until it expires, so it signs in once.
const (
	challengeNonce = 16
	challengeBytes = challengeNonce + 8 + sha256.Size
)

// session is a signed-in operator.
type session struct {
	op      operator.Signer
	expires time.Time
}

// sessions keeps the sessions of signed-in operators and the challenges
// used, in memory: a restart signs everyone out.
type sessions struct {
	key []byte // MACs the challenges

	mu sync.Mutex
	// used holds the challenges that signed someone in, until they expire.
	used map[string]time.Time
	// live maps the SHA-256 of a session token to its session: a look-up
	// by the digest tells a guesser nothing about the tokens by its
	// timing, and the tokens themselves are not kept.
	live map[[32]byte]session
	ttl  time.Duration
	now  func() time.Time
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return &sessions{key: key, used: map[string]time.Time{}, live: map[[32]byte]session{}, ttl: ttl, now: now}
}

// randomToken returns n random bytes in base64 (raw URL alphabet).
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// challenge hands out a new challenge.
func (s *sessions) challenge() string {
	b := make([]byte, challengeBytes)
	_, _ = rand.Read(b[:challengeNonce])
	binary.BigEndian.PutUint64(b[challengeNonce:], uint64(s.now().Add(challengeTTL).Unix()))
	mac := hmac.New(sha256.New, s.key)
	mac.Write(b[:challengeNonce+8])
	copy(b[challengeNonce+8:], mac.Sum(nil))
	return base64.RawURLEncoding.EncodeToString(b)
}

// checkChallenge tells whether c is a challenge this process handed out
// that has not expired and has not signed anyone in.
func (s *sessions) checkChallenge(c string) bool {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) != challengeBytes {
		return false
	}
	mac := hmac.New(sha256.New, s.key)
	mac.Write(b[:challengeNonce+8])
	if !hmac.Equal(mac.Sum(nil), b[challengeNonce+8:]) {
		return false
	}
	exp := time.Unix(int64(binary.BigEndian.Uint64(b[challengeNonce:])), 0)
	if !s.now().Before(exp) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, used := s.used[c]
	return !used
}

// start uses up challenge c and opens a session for op, returning its
// token and expiry; it returns "" when c was used meanwhile, or too many
// sessions are live.
func (s *sessions) start(c string, op operator.Signer) (string, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked()
	if _, used := s.used[c]; used || len(s.live) >= maxSessions {
		return "", time.Time{}
	}
	s.used[c] = s.now().Add(challengeTTL)
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
	for c, exp := range s.used {
		if !now.Before(exp) {
			delete(s.used, c)
		}
	}
	for h, ses := range s.live {
		if !now.Before(ses.expires) {
			delete(s.live, h)
		}
	}
}
