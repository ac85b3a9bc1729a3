package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/alkstore/alkstore/console"
)

func (a *app) uiCmd() *cobra.Command {
	var addr, user string
	var readOnly bool
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the web console (loopback only unless given a token or basic-auth credentials)",
		Long: `Serve the web console on --addr (default 127.0.0.1:8080).

A non-loopback address needs credentials: a token of at least 16 bytes in
$ALKSTORE_UI_TOKEN (sent as "Authorization: Bearer TOKEN", or once as
/?token=TOKEN, which sets a cookie; openssl rand -hex 16 makes one), or --user with the password in $ALKSTORE_UI_PASSWORD (HTTP basic
auth; at least 12 characters). Credentials come from the environment so that they never appear in
the process list or shell history. Without credentials the console answers
only requests addressed to a loopback name (127.0.0.1, [::1], localhost), so
that a web page re-pointed at this machine (DNS rebinding) cannot use it.
--read-only hides every action.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			token := os.Getenv("ALKSTORE_UI_TOKEN")
			password := os.Getenv("ALKSTORE_UI_PASSWORD")
			if user != "" && password == "" {
				return badInput("--user needs the password in ALKSTORE_UI_PASSWORD")
			}
			if token != "" && len(token) < minTokenBytes {
				return badInput("ALKSTORE_UI_TOKEN is %d bytes: use at least %d (openssl rand -hex 16 makes one)", len(token), minTokenBytes)
			}
			if n := utf8.RuneCountInString(password); user != "" && n < minPasswordChars {
				return badInput("ALKSTORE_UI_PASSWORD is %d characters: use at least %d (openssl rand -base64 12 makes one)", n, minPasswordChars)
			}
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return badInput("--addr %q: %v", addr, err)
			}
			if _, err := net.LookupPort("tcp", port); err != nil {
				return badInput("--addr %q: port %q: want a number from 0 to 65535 (or a service name)", addr, port)
			}
			if !isLoopback(host) && token == "" && user == "" {
				return badInput("refusing to serve the console on non-loopback address %s without credentials: set ALKSTORE_UI_TOKEN, or --user with ALKSTORE_UI_PASSWORD", addr)
			}
			st, err := a.store(ctx)
			if err != nil {
				return err
			}
			c := console.New(st, console.Options{ReadOnly: readOnly})
			defer c.Close()
			var h http.Handler = c
			if token != "" || user != "" {
				h = guard(h, token, user, password)
			} else {
				h = loopbackHostOnly(h)
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
			fmt.Fprintf(a.errOut, "alkstore console on http://%s/ (%s)\n", ln.Addr(), map[bool]string{true: "read-only", false: "read-write"}[readOnly])
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(ln) }()
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
			}
			c.Close() // ends the live streams, so Shutdown need not wait for them
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on")
	cmd.Flags().StringVar(&user, "user", "", "require HTTP basic auth with this user (password from $ALKSTORE_UI_PASSWORD)")
	cmd.Flags().BoolVar(&readOnly, "read-only", false, "hide every action and refuse their POSTs")
	return cmd
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

const tokenCookie = "alkstore_token"

// minTokenBytes is the shortest ALKSTORE_UI_TOKEN ui takes: the token is
// the console's only lock on a non-loopback address, and a short one can
// be guessed (16 hex digits are 64 bits).
const minTokenBytes = 16

// minPasswordChars is the shortest ALKSTORE_UI_PASSWORD ui takes with
// --user: the console can delete, cancel and requeue jobs, and basic auth
// is then its only lock; any password was taken before, "x" too.
const minPasswordChars = 12

// loopbackHostOnly serves only requests addressed to a loopback name. Without
// credentials the console trusts whoever can reach it, which on loopback
// should be this machine's user; but a web page whose DNS name its owner
// re-points at 127.0.0.1 (DNS rebinding) is same-origin with the console in
// that user's browser and could read every page, CSRF token included, and
// post actions. Such a request still names the page's own host, so it is
// refused here.
func loopbackHostOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if !isLoopback(host) {
			http.Error(w, fmt.Sprintf("alkstore console: refusing a request for host %q: without credentials the console answers only to a loopback name (127.0.0.1, [::1], localhost)", r.Host), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// guard lets a request through with the token (header, cookie, or once in
// the query, which sets the cookie) or the basic-auth credentials.
func guard(next http.Handler, token, user, password string) http.Handler {
	eq := func(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" {
			if q := r.URL.Query().Get("token"); q != "" && eq(q, token) {
				http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: token, Path: "/", HttpOnly: true,
					SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
				u := *r.URL
				u.RawQuery = ""
				http.Redirect(w, r, u.String(), http.StatusSeeOther) // the token leaves the address bar
				return
			}
			if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && eq(b, token) {
				next.ServeHTTP(w, r)
				return
			}
			if ck, err := r.Cookie(tokenCookie); err == nil && eq(ck.Value, token) {
				next.ServeHTTP(w, r)
				return
			}
		}
		if user != "" {
			if u, p, ok := r.BasicAuth(); ok && eq(u, user) && eq(p, password) {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("WWW-Authenticate", `Basic realm="alkstore", charset="UTF-8"`)
		}
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	})
}
