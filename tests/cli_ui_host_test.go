package tests

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/store"
)

// TestCLIUIAnswersOnlyLoopbackHostsWithoutCredentials: `alkstore ui` without
// credentials trusts whoever reaches it on loopback. A web page whose DNS
// name is re-pointed at 127.0.0.1 (DNS rebinding) is same-origin with the
// console in the operator's browser; its requests still carry its own Host,
// and the console must refuse them, or the page reads payloads and the
// CSRF token and posts actions. (The console is an HTTP matter: one engine.)
func TestCLIUIAnswersOnlyLoopbackHostsWithoutCredentials(t *testing.T) {
	// Parallel: its own SQLite file and process. As the run's first serial
	// test to need the command, it held the serial phase while the command
	// built (15.6 s of a ./tests run at load 14-17, every test after it
	// waiting).
	parallelTest(t)
	bin := cliBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := filepath.Join(t.TempDir(), "ui.db")
	s, err := store.Open(ctx, db)
	require.NoError(t, err)
	defer s.Close()
	q := s.Queue("q1")
	_, err = q.Enqueue(ctx, []byte("secret payload"), store.EnqueueOpts{})
	require.NoError(t, err)

	cmd := exec.CommandContext(ctx, bin, "--dsn", db, "ui", "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "ALKSTORE_DSN=", "DATABASE_URL=", "ALKSTORE_UI_TOKEN=", "ALKSTORE_UI_PASSWORD=")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stderr).ReadString('\n')
	require.NoError(t, err)
	m := regexp.MustCompile(`http://127\.0\.0\.1:(\d+)/`).FindStringSubmatch(line)
	require.NotNil(t, m, "no address in %q", line)
	port := m[1]
	base := "http://127.0.0.1:" + port

	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(host string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/queues/q1", nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "localhost"} {
		code, _ := get(host)
		assert.Equal(t, http.StatusOK, code, "Host %s", host)
	}
	code, body := get("attacker.example:" + port)
	assert.Equal(t, http.StatusMisdirectedRequest, code)
	assert.NotContains(t, body, "csrf", "a rebound page must not read the CSRF token")

	// The action a rebound page would post, with a token read under a
	// loopback Host (the worst case: it cannot read one at all now).
	_, page := get("127.0.0.1:" + port)
	tok := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	require.NotNil(t, tok, "the page under a loopback Host has its CSRF token")
	form := url.Values{"csrf": {tok[1]}, "back": {"/queues/q1"}, "confirm": {"yes"}}
	noJar := &http.Client{CheckRedirect: client.CheckRedirect}
	pause := func(host string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/queues/q1/pause", strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Host = host
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "http://"+host)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		for _, ck := range jar.Cookies(req.URL) {
			req.AddCookie(ck) // the CSRF cookie, which a browser would send
		}
		resp, err := noJar.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	paused := func() bool {
		qs, err := s.Queues(ctx)
		require.NoError(t, err)
		for _, qi := range qs {
			if qi.Name == "q1" {
				return qi.Paused
			}
		}
		return false
	}
	assert.Equal(t, http.StatusMisdirectedRequest, pause("attacker.example:"+port))
	assert.False(t, paused(), "a rebound page paused the queue")
	// The same post under a loopback Host is the operator's, and goes through.
	assert.Equal(t, http.StatusSeeOther, pause("127.0.0.1:"+port))
	assert.True(t, paused(), "the operator's pause")
}
