package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/budget"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
)

// Defaults of Config.
const (
	// DefaultSessionTTL is how long a sign-in lasts unless
	// Config.SessionTTL says otherwise.
	DefaultSessionTTL = 8 * time.Hour
	// DefaultDecisionWait bounds how long a forwarded decision waits for
	// gated's answer unless Config.DecisionWait says otherwise.
	DefaultDecisionWait = 30 * time.Second
	// heartbeat is how often the live feed sends a comment, so that
	// proxies keep the stream open and an expired session is noticed.
	heartbeat = 15 * time.Second
	// feedWriteTimeout bounds one write to a live feed's client.
	feedWriteTimeout = 10 * time.Second
)

// contentSecurityPolicy allows the console's own scripts, styles and
// requests only: no inline script, no other origin, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Config configures the console. NC, JS, Verdicts, Operators and Trails
// are required.
type Config struct {
	// NC forwards decisions to gated.operator.<tenant>.<proposal_id>.
	NC *nats.Conn
	// JS reads the audit stream (GATED_AUDIT).
	JS jetstream.JetStream
	// Verdicts is the GATED_VERDICTS bucket: the feed watches it, the
	// pages read it.
	Verdicts jetstream.KeyValue
	// Operators is gated's operators file (serve --operators): only its
	// operators sign in, each scoped to its tenants.
	Operators *operator.List
	// Trails starts an audit trail; refused console requests are audited
	// on it as gated.EventConsoleRefused.
	Trails func() engine.AuditTrail
	// AuditKeys are the keys whose MACs the proposal page checks. With
	// none, the page checks the chain and says the MACs were not checked.
	AuditKeys [][]byte
	// System, when set, returns the document of the system page: the
	// plugins and their health, the policy revision, the shadow. It must
	// encode as JSON.
	System func(ctx context.Context) any
	// Budgets, when set, are the budget counters and limits gated
	// enforces (serve's store, with the budgets file in force): the
	// budgets page reads them. Without them GET /api/budgets answers 404.
	Budgets *budget.Store
	// SessionTTL is how long a sign-in lasts; default DefaultSessionTTL.
	SessionTTL time.Duration
	// DecisionWait bounds a forwarded decision; default
	// DefaultDecisionWait.
	DecisionWait time.Duration
	// Log logs refusals and failures; default none.
	Log *zap.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Server is the console's HTTP handler. Close ends its live feeds.
type Server struct {
	cfg      Config
	store    *store.Verdicts
	sessions *sessions
	mux      *http.ServeMux
	log      *zap.Logger

	// base ends every live feed when the server closes, so that an HTTP
	// server's Shutdown does not wait on them.
	base  context.Context
	close context.CancelFunc
	feeds sync.WaitGroup
}

var _ http.Handler = (*Server)(nil)

// New returns the console for cfg. Errors wrap ErrInvalidConfig and name
// what is missing.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.NC == nil:
		return nil, fmt.Errorf("%w: the console needs a NATS connection", ErrInvalidConfig)
	case cfg.JS == nil:
		return nil, fmt.Errorf("%w: the console needs JetStream to read the audit stream", ErrInvalidConfig)
	case cfg.Verdicts == nil:
		return nil, fmt.Errorf("%w: the console needs the verdict bucket", ErrInvalidConfig)
	case cfg.Operators == nil || len(cfg.Operators.Signers()) == 0:
		return nil, fmt.Errorf("%w: the console needs an operators file (serve --operators): only listed operators sign in", ErrInvalidConfig)
	case cfg.Trails == nil:
		return nil, fmt.Errorf("%w: the console needs an audit trail for refused requests", ErrInvalidConfig)
	case cfg.SessionTTL < 0 || cfg.DecisionWait < 0:
		return nil, fmt.Errorf("%w: durations must not be negative", ErrInvalidConfig)
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.DecisionWait == 0 {
		cfg.DecisionWait = DefaultDecisionWait
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	s := &Server{
		cfg: cfg, store: store.New(cfg.Verdicts), sessions: newSessions(cfg.SessionTTL, cfg.Now),
		mux: http.NewServeMux(), log: log,
	}
	s.base, s.close = context.WithCancel(context.Background())
	s.routes()
	return s, nil
}

// Close ends the live feeds and waits for them to return. The server
// answers nothing useful after it.
func (s *Server) Close() {
	s.close()
	s.feeds.Wait()
}

func (s *Server) routes() {
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	index, _ := fs.ReadFile(static, "index.html")
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		// Served as it is: the file server would redirect /index.html to /.
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(index))
	})
	s.mux.Handle("GET /assets/", http.StripPrefix("/assets", files))
	s.mux.HandleFunc("GET /api/challenge", s.handleChallenge)
	s.mux.HandleFunc("POST /api/signin", s.sameOrigin(s.handleSignIn))
	s.mux.HandleFunc("POST /api/signout", s.sameOrigin(s.handleSignOut))
	s.mux.HandleFunc("GET /api/me", s.handleMe)
	s.mux.HandleFunc("GET /api/verdicts", s.signedIn(s.handleVerdicts))
	s.mux.HandleFunc("GET /api/feed", s.signedIn(s.handleFeed))
	s.mux.HandleFunc("GET /api/proposals/{tenant}/{id}", s.signedIn(s.handleProposal))
	s.mux.HandleFunc("GET /api/queue", s.signedIn(s.handleQueue))
	s.mux.HandleFunc("GET /api/runs", s.signedIn(s.handleRuns))
	s.mux.HandleFunc("GET /api/system", s.signedIn(s.handleSystem))
	s.mux.HandleFunc("GET /api/shadow", s.signedIn(s.handleShadow))
	s.mux.HandleFunc("GET /api/reviewers", s.signedIn(s.handleReviewers))
	s.mux.HandleFunc("GET /api/budgets", s.signedIn(s.handleBudgets))
	s.mux.HandleFunc("POST /api/decisions", s.sameOrigin(s.signedIn(s.handleDecision)))
}

// ServeHTTP serves the console: the pages under / and /assets/, the API
// under /api/. Every answer carries the console's security headers.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if strings.HasPrefix(r.URL.Path, "/api/") {
		h.Set("Cache-Control", "no-store")
	}
	s.mux.ServeHTTP(w, r)
}

// sessionHandler is a handler that needs a signed-in operator.
type sessionHandler func(w http.ResponseWriter, r *http.Request, ses session)

// signedIn runs h for a request with a live session cookie, and answers
// 401 otherwise.
func (s *Server) signedIn(h sessionHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ses, ok := s.session(r)
		if !ok {
			writeError(w, http.StatusUnauthorized, "sign in first: no session, or it expired")
			return
		}
		h(w, r, ses)
	}
}

// session is the live session of r's cookie.
func (s *Server) session(r *http.Request) (session, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, false
	}
	return s.sessions.get(c.Value)
}

// sameOrigin refuses a state-changing request that a page of another
// origin could have sent: the Origin header must be the console's own
// (browsers send it with every POST), or, without one, Sec-Fetch-Site
// must say same-origin.
func (s *Server) sameOrigin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		why := crossOrigin(r)
		if why == "" {
			h(w, r)
			return
		}
		// Audited when it rides on an operator's session (a page of
		// another origin acting in a signed-in browser); without one it
		// can do nothing, and is only answered, so that anyone who reaches
		// the listener cannot fill the audit stream.
		if _, ok := s.session(r); ok {
			s.refuse(w, r, "", "", why)
			return
		}
		writeError(w, http.StatusForbidden, "refused: "+why)
	}
}

// crossOrigin says why r is not a same-origin request, or "".
func crossOrigin(r *http.Request) string {
	origin := r.Header.Get("Origin")
	if origin == "" {
		if r.Header.Get("Sec-Fetch-Site") == "same-origin" {
			return ""
		}
		return "a state-changing request without an Origin header"
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return "an unreadable Origin header"
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if u.Scheme != scheme || !strings.EqualFold(u.Host, r.Host) {
		return fmt.Sprintf("a request from origin %s to %s://%s", clip(origin), scheme, clip(r.Host))
	}
	return ""
}

// refusedData is the data of an gated.EventConsoleRefused audit event.
type refusedData struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	// Operator and Key are the signed-in operator's, when there is one.
	Operator string `json:"operator,omitempty"`
	Key      string `json:"key,omitempty"`
	Reason   string `json:"reason"`
}

// refuse audits a refused request for tenant's data (or gated's own,
// when tenant is not a tenant token) and answers 403, or 503 when the
// refusal could not be audited.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, tenant, operatorID, why string) {
	key := ""
	if ses, ok := s.session(r); ok {
		operatorID, key = ses.op.ID, ses.op.Key
	}
	if !gated.ValidTenant(tenant) {
		tenant = gated.UnknownTenant
	}
	data, _ := json.Marshal(refusedData{Method: r.Method, Path: clip(r.URL.Path), Operator: operatorID, Key: key, Reason: why})
	ev := gated.AuditEvent{V: gated.SchemaVersion, Event: gated.EventConsoleRefused, Tenant: tenant, At: s.cfg.Now().UTC(), Data: data}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if _, err := s.cfg.Trails().Seal(ctx, ev); err != nil {
		s.log.Error("auditing a refused console request", zap.String("path", r.URL.Path), zap.Error(err))
		writeError(w, http.StatusServiceUnavailable, "refused ("+why+"), and the refusal could not be audited; retry")
		return
	}
	s.log.Info("console request refused", zap.String("path", r.URL.Path), zap.String("operator", operatorID), zap.String("reason", why))
	writeError(w, http.StatusForbidden, "refused: "+why)
}

// scoped checks that ses may see tenant, refusing (and auditing) the
// request otherwise. It reports whether to go on.
func (s *Server) scoped(w http.ResponseWriter, r *http.Request, ses session, tenant string) bool {
	if !gated.ValidTenant(tenant) || tenant == gated.UnknownTenant {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("tenant %q must match [a-z0-9_-]{1,64}", clip(tenant)))
		return false
	}
	if !ses.op.Allows(tenant) {
		s.refuse(w, r, tenant, ses.op.ID, fmt.Sprintf("operator %s may not see tenant %s", ses.op.ID, tenant))
		return false
	}
	return true
}

func (s *Server) handleChallenge(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"challenge": s.sessions.challenge(), "prefix": SignInPrefix})
}

func (s *Server) handleSignIn(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxSignInBytes+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading the request: "+err.Error())
		return
	}
	in, err := DecodeSignIn(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.sessions.checkChallenge(in.Challenge) {
		writeError(w, http.StatusUnauthorized, "the challenge is not one the console handed out, expired, or used: sign in again")
		return
	}
	op, ok := s.signer(in.Key)
	if !ok {
		writeError(w, http.StatusUnauthorized, "key "+in.Key+" is not in gated's operators file")
		return
	}
	pub, err := nkeys.FromPublicKey(in.Key)
	if err == nil {
		err = pub.Verify([]byte(SignInPrefix+in.Challenge), in.Sig)
	}
	if err != nil {
		writeError(w, http.StatusUnauthorized, "the signature does not verify with operator "+op.ID+"'s key: sign with that key's seed")
		return
	}
	tok, exp := s.sessions.start(in.Challenge, op)
	if tok == "" {
		writeError(w, http.StatusUnauthorized, "the challenge was used meanwhile, or too many sessions are live: sign in again")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: tok, Path: "/", Expires: exp, MaxAge: int(time.Until(exp).Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	s.log.Info("operator signed in to the console", zap.String("operator", op.ID))
	writeJSON(w, http.StatusOK, me(session{op: op, expires: exp}))
}

// signer is the listed operator of key.
func (s *Server) signer(key string) (operator.Signer, bool) {
	for _, op := range s.cfg.Operators.Signers() {
		if op.Key == key {
			return op, true
		}
	}
	return operator.Signer{}, false
}

func (s *Server) handleSignOut(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(cookieName); err == nil {
		s.sessions.end(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	writeJSON(w, http.StatusOK, map[string]bool{"signed_out": true})
}

// Me is the answer of GET /api/me: who is signed in, and for which
// tenants (empty: every tenant). Without a session only SignedIn is set,
// false.
type Me struct {
	SignedIn bool      `json:"signed_in"`
	Operator string    `json:"operator,omitempty"`
	Key      string    `json:"key,omitempty"`
	Tenants  []string  `json:"tenants,omitempty"`
	Expires  time.Time `json:"expires,omitzero"`
}

func me(ses session) Me {
	t := ses.op.Tenants
	if t == nil {
		t = []string{}
	}
	return Me{SignedIn: true, Operator: ses.op.ID, Key: ses.op.Key, Tenants: t, Expires: ses.expires.UTC()}
}

// handleMe answers who is signed in; without a session it answers 200
// with signed_in false, so that a page that loads signed out sees no
// error.
func (s *Server) handleMe(w http.ResponseWriter, r *http.Request) {
	if ses, ok := s.session(r); ok {
		writeJSON(w, http.StatusOK, me(ses))
		return
	}
	writeJSON(w, http.StatusOK, Me{})
}

func (s *Server) handleSystem(w http.ResponseWriter, r *http.Request, _ session) {
	if s.cfg.System == nil {
		writeJSON(w, http.StatusOK, map[string]any{})
		return
	}
	writeJSON(w, http.StatusOK, s.cfg.System(r.Context()))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// apiError is the body of every error answer.
type apiError struct {
	Error string `json:"error"`
	// Code is gated's refusal code of a forwarded decision, when it
	// refused one.
	Code int `json:"code,omitempty"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, apiError{Error: msg})
}

// errStopWatch ends a watch early.
var errStopWatch = errors.New("stop watching")
