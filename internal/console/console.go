package console

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/harvest-engine/harvest/internal/auth"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Config configures a Console.
type Config struct {
	// API is the HTTP API's handler: its routes, each behind its scope.
	// The console calls it in the process, as a client of the API.
	API http.Handler
	// Auth, when the API needs a bearer token, is its authenticator: the
	// console then asks its user for a token at sign-in and keeps it in a
	// session in this process's memory (sessions.go); the browser holds
	// only the session's id.
	Auth *auth.Authenticator
	// SessionTTL is how long a sign-in lasts, default 12 h.
	SessionTTL time.Duration
	// TrustedProxies are the proxies (IP addresses or CIDRs) whose
	// X-Forwarded-Proto: https says that the user came over TLS: the
	// session cookie is then marked Secure, as it is on a TLS connection.
	TrustedProxies []string
	// Now is the sessions' clock, default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Console serves the web console under /ui/.
type Console struct {
	cfg     Config
	mux     *http.ServeMux
	handler http.Handler
	pages   map[string]*template.Template
	// sessions are the signed-in users; proxies the trusted proxies.
	sessions *sessions
	proxies  []netip.Prefix
}

// New parses the console's templates and returns it.
func New(cfg Config) (*Console, error) {
	if cfg.API == nil {
		return nil, errors.New("console config: API is required")
	}
	if cfg.SessionTTL < 0 {
		return nil, fmt.Errorf("console config: SessionTTL %s: want a positive duration", cfg.SessionTTL)
	}
	proxies, err := parseProxies(cfg.TrustedProxies)
	if err != nil {
		return nil, err
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Console{cfg: cfg, mux: http.NewServeMux(), pages: map[string]*template.Template{},
		sessions: newSessions(cmp.Or(cfg.SessionTTL, DefaultSessionTTL), cfg.Now), proxies: proxies}
	for _, page := range []string{"executions", "execution", "confirm", "reset", "signal", "start", "workflows", "webhooks", "workers", "taskqueue", "schedules", "schedule", "scheduleconfirm", "login", "problem"} {
		// schedulespec.html holds a part that more than one page shows.
		t, err := template.New(page).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/schedulespec.html", "templates/"+page+".html")
		if err != nil {
			return nil, fmt.Errorf("console: parse %s: %w", page, err)
		}
		c.pages[page] = t
	}
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	c.mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	c.mux.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/executions", http.StatusSeeOther)
	})
	c.mux.HandleFunc("GET /ui/login", c.handleLoginForm)
	c.mux.HandleFunc("POST /ui/login", c.handleLogin)
	c.mux.HandleFunc("POST /ui/logout", c.handleLogout)
	c.mux.HandleFunc("GET /ui/executions", c.signedIn(c.handleExecutions))
	c.mux.HandleFunc("GET /ui/executions/{id}", c.signedIn(c.handleExecution))
	c.mux.HandleFunc("GET /ui/executions/{id}/reset", c.signedIn(c.handleResetForm))
	c.mux.HandleFunc("POST /ui/executions/{id}/reset", c.signedIn(c.handleReset))
	c.mux.HandleFunc("GET /ui/executions/{id}/signal", c.signedIn(c.handleSignalForm))
	c.mux.HandleFunc("POST /ui/executions/{id}/signal", c.signedIn(c.handleSignal))
	c.mux.HandleFunc("GET /ui/executions/{id}/{action}", c.signedIn(c.handleConfirm))
	c.mux.HandleFunc("POST /ui/executions/{id}/{action}", c.signedIn(c.handleAction))
	c.mux.HandleFunc("GET /ui/workflows", c.signedIn(c.handleWorkflows))
	c.mux.HandleFunc("POST /ui/workflows/{name}/admission", c.signedIn(c.handleAdmission))
	c.mux.HandleFunc("GET /ui/workflows/start", c.signedIn(c.handleStartForm))
	c.mux.HandleFunc("POST /ui/workflows/start", c.signedIn(c.handleStart))
	c.mux.HandleFunc("GET /ui/webhooks", c.signedIn(c.handleWebhooks))
	c.mux.HandleFunc("GET /ui/workers", c.signedIn(c.handleWorkers))
	c.mux.HandleFunc("GET /ui/task-queues/{name}", c.signedIn(c.handleTaskQueue))
	c.mux.HandleFunc("GET /ui/schedules", c.signedIn(c.handleSchedules))
	c.mux.HandleFunc("GET /ui/schedules/{id}", c.signedIn(c.handleSchedule))
	c.mux.HandleFunc("GET /ui/schedules/{id}/{action}", c.signedIn(c.handleScheduleConfirm))
	c.mux.HandleFunc("POST /ui/schedules/{id}/{action}", c.signedIn(c.handleScheduleAction))
	c.mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		c.problem(w, r, http.StatusNotFound, "Not found", "The console has no page at "+r.URL.Path+".")
	})
	// Forms that change something are refused when they come from another
	// site (the Sec-Fetch-Site and Origin headers tell), whatever cookie
	// the browser sends along.
	c.handler = securityHeaders(forgetLegacyToken(http.NewCrossOriginProtection().Handler(c.mux)))
	return c, nil
}

// ServeHTTP serves the console's pages.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.handler.ServeHTTP(w, r) }

// securityHeaders forbids framing and any script or style from elsewhere:
// the console runs no script at all.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

// forgetLegacyToken clears the cookie in which earlier versions kept the
// token itself, wherever a browser still sends it; the console no longer
// reads it.
func forgetLegacyToken(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := r.Cookie(legacyTokenCookie); err == nil {
			http.SetCookie(w, &http.Cookie{Name: legacyTokenCookie, Value: "", Path: "/ui/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
		}
		h.ServeHTTP(w, r)
	})
}

// apiFor is the API as the requesting user: with their session's token,
// if any.
func (c *Console) apiFor(r *http.Request) apiCaller {
	a := apiCaller{h: c.cfg.API}
	if sess, ok := c.sessions.get(sessionID(r)); ok {
		a.token = sess.token
	}
	return a
}

// page is what every template gets: the page's own data and the layout's.
type page struct {
	Title  string
	Nav    string
	Tokens bool
	// Refresh, when set, is the page's own URL to load again every
	// refreshSeconds (a <meta http-equiv="refresh">: no script).
	Refresh        string
	RefreshSeconds int
	Data           any
}

// refreshSeconds is how often a page that refreshes itself does.
const refreshSeconds = 5

// refresher is the data of a page that may refresh itself: refresh is
// the URL to load again, "" for none.
type refresher interface{ refresh() string }

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	var b strings.Builder
	nav, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/ui/"), "/")
	p := page{Title: title, Nav: nav, Tokens: c.cfg.Auth != nil, Data: data}
	if rf, ok := data.(refresher); ok {
		if p.Refresh = rf.refresh(); p.Refresh != "" {
			p.RefreshSeconds = refreshSeconds
		}
	}
	if err := c.pages[name].ExecuteTemplate(&b, "layout", p); err != nil {
		c.cfg.Logger.Error("console: render", "page", name, "err", err)
		http.Error(w, "the console could not render this page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

type problemData struct {
	Heading string
	Message string
}

func (c *Console) problem(w http.ResponseWriter, r *http.Request, status int, heading, message string) {
	c.render(w, r, status, "problem", heading, problemData{Heading: heading, Message: message})
}

// apiProblem answers a failed API call: a missing or refused token ends
// the session and leads to the login page, any other answer is shown as
// the API gave it.
func (c *Console) apiProblem(w http.ResponseWriter, r *http.Request, err error) {
	var apiErr *apiError
	if !errors.As(err, &apiErr) {
		c.cfg.Logger.Error("console: API call", "path", r.URL.Path, "err", err)
		c.problem(w, r, http.StatusInternalServerError, "Something went wrong", "The console could not read the API; the log has the detail.")
		return
	}
	switch apiErr.status {
	case http.StatusUnauthorized:
		c.sessions.revoke(sessionID(r))
		clearSession(w)
		http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
	case http.StatusForbidden:
		c.problem(w, r, http.StatusForbidden, "Not allowed", apiErr.body.Message)
	case http.StatusNotFound:
		c.problem(w, r, http.StatusNotFound, "Not found", apiErr.body.Message)
	default:
		msg := apiErr.body.Message
		if apiErr.body.RequestID != "" {
			msg += " (request " + apiErr.body.RequestID + ")"
		}
		c.problem(w, r, apiErr.status, "The API answered "+http.StatusText(apiErr.status), msg)
	}
}

// needsLogin redirects to the login page and reports true when the API
// needs a token and the user has no live session: none, one signed out,
// expired, or forgotten by a restart.
func (c *Console) needsLogin(w http.ResponseWriter, r *http.Request) bool {
	if c.cfg.Auth == nil {
		return false
	}
	if _, ok := c.sessions.get(sessionID(r)); ok {
		return false
	}
	if sessionID(r) != "" {
		clearSession(w)
	}
	http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
	return true
}

type loginData struct {
	Next    string
	Message string
}

func (c *Console) handleLoginForm(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Auth == nil {
		http.Redirect(w, r, "/ui/executions", http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "login", "Sign in", loginData{Next: localPath(r.URL.Query().Get("next"))})
}

// handleLogin checks the token against the API's tokens and starts a
// session with it: the browser gets the session's id, never the token.
func (c *Console) handleLogin(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Auth == nil {
		http.Redirect(w, r, "/ui/executions", http.StatusSeeOther)
		return
	}
	if err := r.ParseForm(); err != nil {
		c.problem(w, r, http.StatusBadRequest, "Bad form", "The sign-in form could not be read.")
		return
	}
	next := localPath(r.PostForm.Get("next"))
	token := strings.TrimSpace(r.PostForm.Get("token"))
	p, err := c.cfg.Auth.Authenticate("Bearer " + token)
	if err != nil {
		c.cfg.Logger.Info("console: sign-in refused", "reason", err.Error())
		c.render(w, r, http.StatusUnauthorized, "login", "Sign in", loginData{Next: next, Message: "The API does not know this token."})
		return
	}
	// A token without the read scope may still sign in: each page says
	// what it lacks. A session the browser had before is ended.
	if old := sessionID(r); old != "" {
		c.sessions.revoke(old)
	}
	id, sess := c.sessions.create(token, p)
	c.cfg.Logger.Info("console: signed in", "token", sess.name, "scopes", sess.scopes, "expires", sess.expires)
	c.setSession(w, r, id)
	http.Redirect(w, r, next, http.StatusSeeOther) //nolint:gosec // G710: next passed localPath, a path under /ui/
}

// handleLogout ends the session: its id is of no use afterwards, wherever
// it was kept.
func (c *Console) handleLogout(w http.ResponseWriter, r *http.Request) {
	if id := sessionID(r); id != "" {
		c.sessions.revoke(id)
	}
	clearSession(w)
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// localPath keeps a redirect target inside the console.
func localPath(p string) string {
	if !strings.HasPrefix(p, "/ui/") || strings.HasPrefix(p, "//") || strings.ContainsAny(p, "\\\r\n") {
		return "/ui/executions"
	}
	return p
}

// signedIn serves a page that calls the API: it leads to the sign-in
// form first when the API needs a token and the user has none, and
// bounds the page's API calls.
func (c *Console) signedIn(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.needsLogin(w, r) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		h(w, r.WithContext(ctx))
	}
}
