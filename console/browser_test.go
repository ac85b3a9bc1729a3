package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/alkstore/alkstore/console"
	"github.com/alkstore/alkstore/internal/pgtest"
	"github.com/alkstore/alkstore/store"
)

// The console tested as a person uses it: a real headless Chromium
// (Debian's chromium; .ci/run installs it) drives the pages, on both
// engines. The console is mounted under /admin, as an application would.

var (
	pgServer *pgtest.Server // nil when ALK_ENGINES leaves out pg
	engines  []string       // the engines ALK_ENGINES selects; both by default
)

func TestMain(m *testing.M) {
	var err error
	if engines, err = pgtest.Engines(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if !slices.Contains(engines, "pg") {
		code := m.Run() // ALK_ENGINES=lite: no PostgreSQL needed
		browser.close()
		templates.Remove()
		os.Exit(code)
	}
	srv, err := pgtest.StartForTests()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pgServer = srv
	code := m.Run()
	browser.close()
	srv.Stop()
	templates.Remove()
	os.Exit(code)
}

// templates are the migrated databases each test's are copies of: no test
// here is of migrations (a migration of each test's database was a fifth
// of the package's CPU).
var templates = pgtest.Templates{Migrate: func(ctx context.Context, dsn string) error {
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	return st.Close()
}}

// freshDatabase is a fresh, migrated database of engine for t.
func freshDatabase(t *testing.T, engine string) string {
	t.Helper()
	dsn, err := templates.Fresh(context.Background(), pgServer, engine, filepath.Join(t.TempDir(), "alk.db"))
	require.NoError(t, err, "a copy of the migrated %s template", engine)
	return dsn
}

// chromium finds the browser; the tests skip, saying why, only when there
// is none.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium found (looked for chromium, chromium-browser, google-chrome): install Debian's chromium (apt-get install -y chromium), as .ci/run does, to run the browser tests")
	return ""
}

// browser is the one Chromium the tests' tabs run in, started by the first
// test that needs it and stopped by TestMain: a browser started for each
// of the ten test bodies was a fifth of the package's CPU. Each test's tab
// gets a BrowserContext of its own (chromedp.WithNewBrowserContext), as
// fresh as a new browser's profile: its own cookies, storage and cache.
var browser sharedBrowser

type sharedBrowser struct {
	once sync.Once
	ctx  context.Context // the browser's first tab, which stays blank
	stop func()
	err  error
}

// tab opens a tab in a new BrowserContext of the shared browser, closed
// (with its BrowserContext) when the test ends.
func (b *sharedBrowser) tab(t *testing.T, exe string) context.Context {
	t.Helper()
	b.once.Do(func() {
		actx, cancelA := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1200, 900))...)
		bctx, cancelB := chromedp.NewContext(actx)
		b.ctx, b.stop = bctx, func() { cancelB(); cancelA() }
		b.err = chromedp.Do(bctx)
	})
	require.NoError(t, b.err, "start chromium")
	tctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(tctx), "open a tab")
	return tctx
}

func (b *sharedBrowser) close() {
	if b.stop != nil {
		b.stop()
	}
}

type env struct {
	st      *store.Store
	srv     *httptest.Server
	browser context.Context
	base    string // the console's URL
}

const prefix = "/admin"

// eachEngine runs body with a console on a fresh database of each engine
// and a browser.
func eachEngine(t *testing.T, opts console.Options, body func(t *testing.T, e *env)) {
	exe := chromium(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			dsn := freshDatabase(t, engine)
			st, err := store.Open(context.Background(), dsn)
			require.NoError(t, err)
			t.Cleanup(func() { _ = st.Close() })
			if opts.Prefix == "" {
				opts.Prefix = prefix
			}
			opts.SampleInterval = time.Second
			c := console.New(st, opts)
			mux := http.NewServeMux()
			mux.Handle(opts.Prefix+"/", c)
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			t.Cleanup(func() { _ = c.Close() })

			bctx := browser.tab(t, exe)
			// Every confirm() is answered yes, as the operator would.
			dialogs := chromedp.Events(bctx, page.JavascriptDialogOpening)
			go func() {
				for _, err := range dialogs {
					if err != nil {
						return
					}
					go func() {
						_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
					}()
				}
			}()
			body(t, &env{st: st, srv: srv, browser: bctx, base: srv.URL + (&url.URL{Path: opts.Prefix}).EscapedPath()})
		})
	}
}

// run runs browser actions with a deadline.
func (e *env) run(t *testing.T, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.browser, 60*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, actions...))
}

// eval evaluates a JavaScript expression (awaiting a promise) in the page.
func eval[T any](t *testing.T, e *env, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.browser, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	return v
}

// text reads an element's text in one evaluation (a live update may
// replace the element between two protocol calls).
func text(t *testing.T, e *env, sel string) string {
	t.Helper()
	return eval[string](t, e, fmt.Sprintf(`document.querySelector(%q).textContent`, sel))
}

// live waits until the page's live connection is open.
func live() chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(`body[data-live="on"]`))
}

func visible(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}
func gone(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitNotPresent(chromedp.CSS(sel))
}

// click waits for sel, then clicks it from the page's own JavaScript in the
// next task: a live update may replace the element between the protocol's
// finding and clicking it (chromedp then fails with "Could not find node
// with given id"), whereas the page's querySelector and click run in one
// task on whatever element sel names then, as a person's click would.
func click(sel string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		if _, err := chromedp.WaitVisible(chromedp.CSS(sel))(ctx, t); err != nil {
			return chromedp.Void{}, err
		}
		_, err := chromedp.Evaluate[bool](fmt.Sprintf(
			`(() => { const sel = %q; setTimeout(() => document.querySelector(sel).click(), 0); return true })()`, sel))(ctx, t)
		return chromedp.Void{}, err
	}
}

func count(t *testing.T, e *env, selector string) int {
	t.Helper()
	return eval[int](t, e, fmt.Sprintf(`document.querySelectorAll(%q).length`, selector))
}

// post sends a POST from the page with fetch (the page's cookies, no form
// token) and returns its status.
func post(t *testing.T, e *env, path string) int {
	t.Helper()
	return eval[int](t, e, fmt.Sprintf(`fetch(%q, {method: "POST", body: new URLSearchParams({confirm: "yes"})}).then(r => r.status)`, e.base+path))
}

// TestBrowserOverviewLive: the overview lists queues and streams, and a
// job enqueued while the page is open appears without a reload, on the
// overview and on the queue's page.
func TestBrowserOverviewLive(t *testing.T) {
	eachEngine(t, console.Options{}, func(t *testing.T, e *env) {
		ctx := context.Background()
		_, err := e.st.Queue("emails").Enqueue(ctx, []byte(`{"to":"<b>ann</b>"}`), store.EnqueueOpts{})
		require.NoError(t, err)
		_, err = e.st.Stream("orders").Publish(ctx, []byte("o1"))
		require.NoError(t, err)
		require.NoError(t, e.st.Stream("orders").SaveOffset(ctx, "billing", 0))

		e.run(t, chromedp.Navigate(e.base+"/"), live(), visible(`tr[data-queue="emails"]`), visible(`tr[data-stream="orders"] .consumer`))
		queues, streams := text(t, e, "#queues"), text(t, e, "#streams")
		assert.Contains(t, queues, "emails")
		assert.Contains(t, streams, "billing (1)", "each consumer with its lag")
		require.Zero(t, count(t, e, `tr[data-queue="signups"]`))

		_, err = e.st.Queue("signups").Enqueue(ctx, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		e.run(t, visible(`tr[data-queue="signups"]`))

		e.run(t, chromedp.Navigate(e.base+"/queues/emails"), live(), visible(`#jobs`))
		payload := text(t, e, "#jobs td.payload")
		assert.Equal(t, `{"to":"<b>ann</b>"}`, payload, "payloads are shown as text, escaped")
		id, err := e.st.Queue("emails").Enqueue(ctx, []byte("second"), store.EnqueueOpts{})
		require.NoError(t, err)
		e.run(t, visible(fmt.Sprintf(`tr[data-job-id="%d"]`, id)))
	})
}

// TestBrowserRequeueDeadJob: the Requeue button of a dead job, confirmed,
// moves it back to pending and it leaves the dead list.
func TestBrowserRequeueDeadJob(t *testing.T) {
	eachEngine(t, console.Options{}, func(t *testing.T, e *env) {
		ctx := context.Background()
		q := e.st.Queue("emails")
		id, err := q.Enqueue(ctx, []byte("x"), store.EnqueueOpts{})
		require.NoError(t, err)
		other, err := q.Enqueue(ctx, []byte("y"), store.EnqueueOpts{})
		require.NoError(t, err)
		jobs, err := q.Claim(ctx, "w", 2, time.Minute)
		require.NoError(t, err)
		for _, j := range jobs {
			require.NoError(t, j.Fail(ctx, "boom"))
		}
		row := fmt.Sprintf(`tr[data-job-id="%d"]`, id)
		e.run(t, chromedp.Navigate(e.base+"/queues/emails?state=dead"), live(),
			visible(row),
			click(row+` form[action$="/requeue"] button`),
			gone(row),
			visible(fmt.Sprintf(`tr[data-job-id="%d"]`, other)))
		j, err := e.st.Job(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, store.JobPending, j.State)
		j, err = e.st.Job(ctx, other)
		require.NoError(t, err)
		assert.Equal(t, store.JobDead, j.State, "only the clicked job moved")
	})
}

// TestBrowserPauseQueue: Pause, confirmed, stops every worker from
// claiming the queue's jobs (a job enqueued then stays pending and a claim
// gets nothing); Resume lets the running worker take it.
func TestBrowserPauseQueue(t *testing.T) {
	eachEngine(t, console.Options{}, func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(context.Background())
		q := e.st.Queue("emails")
		handled := make(chan int64, 10)
		workDone := make(chan error, 1)
		go func() {
			workDone <- q.Work(ctx, store.WorkOpts{Visibility: time.Minute}, func(_ context.Context, j *store.Job) error {
				handled <- j.ID
				return nil
			})
		}()
		t.Cleanup(func() { cancel(); <-workDone })
		first, err := q.Enqueue(ctx, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		select {
		case got := <-handled:
			require.Equal(t, first, got)
		case <-time.After(30 * time.Second):
			t.Fatal("the worker never ran the first job")
		}

		e.run(t, chromedp.Navigate(e.base+"/queues/emails"), live(),
			click(`form[action$="/queues/emails/pause"] button`),
			visible(`#paused`))
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		require.True(t, st.Paused)

		held, err := q.Enqueue(ctx, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		probe, err := q.Claim(ctx, "probe", 1, time.Minute)
		require.NoError(t, err)
		assert.Empty(t, probe, "a paused queue hands out nothing")
		j, err := e.st.Job(ctx, held)
		require.NoError(t, err)
		assert.Equal(t, store.JobPending, j.State)

		e.run(t, click(`form[action$="/queues/emails/resume"] button`),
			gone(`#paused`))
		select {
		case got := <-handled:
			assert.Equal(t, held, got, "the running worker claims again after Resume")
		case <-time.After(30 * time.Second):
			t.Fatal("the worker did not claim after Resume")
		}
	})
}

// TestBrowserReadOnly: a read-only console shows no action and refuses
// every POST, even one with a valid token.
func TestBrowserReadOnly(t *testing.T) {
	eachEngine(t, console.Options{ReadOnly: true}, func(t *testing.T, e *env) {
		ctx := context.Background()
		q := e.st.Queue("emails")
		_, err := q.Enqueue(ctx, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		jobs, err := q.Claim(ctx, "w", 1, time.Minute)
		require.NoError(t, err)
		require.NoError(t, jobs[0].Fail(ctx, "boom"))
		require.NoError(t, e.st.Schedule("nightly").Set(ctx, store.ScheduleSpec{Spec: "@daily", Queue: "emails"}))
		for _, path := range []string{"/", "/queues/emails?state=dead", fmt.Sprintf("/jobs/%d", jobs[0].ID), "/schedules"} {
			e.run(t, chromedp.Navigate(e.base+path), visible(`main`))
			assert.Zero(t, count(t, e, `form[method="post"], button[type="submit"]`), "no action on %s", path)
		}
		assert.Equal(t, http.StatusForbidden, post(t, e, "/queues/emails/pause"))
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		assert.False(t, st.Paused)
	})
}

// TestBrowserCSRF: a POST without the form's token is refused, from the
// console's own page (cookie present) and from elsewhere (no cookie).
func TestBrowserCSRF(t *testing.T) {
	eachEngine(t, console.Options{}, func(t *testing.T, e *env) {
		ctx := context.Background()
		q := e.st.Queue("emails")
		_, err := q.Enqueue(ctx, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		e.run(t, chromedp.Navigate(e.base+"/queues/emails"), visible(`#jobs`))
		assert.Equal(t, http.StatusForbidden, post(t, e, "/queues/emails/pause"), "a POST with the cookie but without the form's token")

		resp, err := http.PostForm(e.base+"/queues/emails/pause", url.Values{"confirm": {"yes"}, "csrf": {"forged"}})
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusForbidden, resp.StatusCode)
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		assert.False(t, st.Paused, "no forged POST paused the queue")

		// The page's own form, with its token, works.
		e.run(t, click(`form[action$="/queues/emails/pause"] button`),
			visible(`#paused`))
		st, err = q.Stats(ctx)
		require.NoError(t, err)
		assert.True(t, st.Paused)
	})
}

// TestBrowserActionsUnderAnEscapedPrefix: mounted under "/ä", the queue's
// Pause, reached by the overview's link, and Resume, on the page typed
// with its escapes in lower case, both act. Before, the links held
// "/%c3%a4" and the CSRF cookie's Path "/%C3%A4/": Chromium posted without
// the cookie (403) and #paused never showed.
func TestBrowserActionsUnderAnEscapedPrefix(t *testing.T) {
	eachEngine(t, console.Options{Prefix: "/ä"}, func(t *testing.T, e *env) {
		ctx := context.Background()
		q := e.st.Queue("emails")
		_, err := q.Enqueue(ctx, nil, store.EnqueueOpts{})
		require.NoError(t, err)
		e.run(t, chromedp.Navigate(e.srv.URL+"/ä/"), live(),
			click(`tr[data-queue="emails"] a`), visible(`#jobs`),
			click(`form[action$="/queues/emails/pause"] button`), visible(`#paused`))
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		require.True(t, st.Paused)
		e.run(t, chromedp.Navigate(e.srv.URL+"/%c3%a4/queues/emails"), visible(`#paused`),
			click(`form[action$="/queues/emails/resume"] button`), gone(`#paused`))
		st, err = q.Stats(ctx)
		require.NoError(t, err)
		assert.False(t, st.Paused)
	})
}
