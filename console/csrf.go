package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
)

// CSRF protection: a random cookie per browser (SameSite=Strict, HttpOnly)
// and, in every form, an HMAC of it under the console's secret. A POST
// needs both and a matching Origin when the browser sends one.
const csrfCookie = "alkstore_csrf"

func newSecret() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}

// csrfToken returns the form token for r, setting the cookie if missing.
func (c *Console) csrfToken(w http.ResponseWriter, r *http.Request) string {
	ck, err := r.Cookie(csrfCookie)
	val := ""
	if err == nil && len(ck.Value) >= 32 {
		val = ck.Value
	} else {
		val = base64.RawURLEncoding.EncodeToString(newSecret())
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: val, Path: cookiePath(c.baseURL), HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	}
	return c.sign(val)
}

// cookiePath is the CSRF cookie's Path: the escaped base cut at the last
// slash before its first escape ("/alkstore": "/alkstore/"; "/ops/ädmin":
// "/ops/"; "/ä": "/"). A browser sends a cookie only to request paths its
// Path is a byte prefix of, written as the URL the browser was given or
// typed: "/%C3%A4" typed as /ä/, "/%c3%a4" from a link another tool wrote,
// "/a'b" where Go writes "/a%27b". The console serves every spelling that
// decodes to its base (cutEscapedPrefix), so the cookie must reach every
// one: a form posted without it is refused, and a page fetched without it
// sets a new one, breaking the forms of the other open pages. The wider
// Path costs nothing: the cookie alone authorizes no action (the form's
// token is an HMAC of it under this console's secret), and it stays
// HttpOnly and SameSite=Strict.
//
// A ';' counts as such a byte too: a path keeps it unescaped, but a cookie
// attribute cannot hold it (net/http drops it from the Path, so under
// "/a;b" the cookie went to "/ab/", which no page of the console is under,
// and every action was refused; review54a).
func cookiePath(baseURL string) string {
	i := strings.IndexAny(baseURL, "%;")
	if i < 0 {
		return baseURL + "/"
	}
	return baseURL[:strings.LastIndexByte(baseURL[:i], '/')+1]
}

func (c *Console) sign(val string) string {
	m := hmac.New(sha256.New, c.secret)
	m.Write([]byte(val))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// csrfOK checks a POST's token against its cookie, and its Origin.
func (c *Console) csrfOK(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	ck, err := r.Cookie(csrfCookie)
	if err != nil || ck.Value == "" {
		return false
	}
	tok := r.PostFormValue("csrf")
	return tok != "" && hmac.Equal([]byte(tok), []byte(c.sign(ck.Value)))
}
