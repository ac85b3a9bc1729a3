package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
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
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: val, Path: c.baseURL + "/", HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	}
	return c.sign(val)
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
