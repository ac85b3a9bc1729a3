// Command consoledemo renders the web console's main pages on a demo data
// set to PNG files (make screenshots; README "Web console"). It needs
// Debian's chromium. The data set lives in a temporary SQLite file; an
// hour of chart samples is played in a few seconds through the console's
// clock.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/alkstore/alkstore/console"
	"github.com/alkstore/alkstore/store"
)

func main() {
	out := flag.String("out", "docs/screenshots", "folder for the PNG files")
	play := flag.Duration("play", 8*time.Second, "real time the demo hour is played in")
	flag.Parse()
	log.SetFlags(0)
	if err := run(*out, *play); err != nil {
		log.Fatal(err)
	}
}

func run(out string, play time.Duration) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "alkstore-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(ctx, filepath.Join(dir, "demo.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	if err := seed(ctx, st); err != nil {
		return err
	}

	// The demo hour: the console's clock runs speed times faster than
	// real time, from an hour ago, so the charts fill in play.
	speed := float64(time.Hour) / float64(play)
	realStart := time.Now()
	start := realStart.Add(-time.Hour)
	clock := func() time.Time { return start.Add(time.Duration(float64(time.Since(realStart)) * speed)) }
	c := console.New(st, console.Options{Prefix: "/admin", SampleInterval: play / 120, Clock: clock})
	defer c.Close()
	mux := http.NewServeMux()
	mux.Handle("/admin/", c)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	if err := activity(ctx, st, play); err != nil {
		return err
	}
	return shoot(srv.URL+"/admin", out)
}

// seed writes the demo's queues, streams, keys and schedules.
func seed(ctx context.Context, st *store.Store) error {
	for _, s := range []struct{ name, spec, queue string }{
		{"nightly-report", "30 2 * * *", "reports"}, {"cleanup", "@every 15m", "maintenance"}, {"digest", "0 9 * * 1-5", "emails"},
	} {
		if err := st.Schedule(s.name).Set(ctx, store.ScheduleSpec{Spec: s.spec, Queue: s.queue, Payload: []byte(`{}`)}); err != nil {
			return err
		}
	}
	if err := st.Schedule("cleanup").Pause(ctx); err != nil {
		return err
	}
	if err := st.Queue("reports").Configure(ctx, store.QueueConfig{CompletedRetention: 24 * time.Hour}); err != nil {
		return err
	}
	users := st.Stream("users")
	if err := users.Configure(ctx, store.StreamConfig{Compacted: true}); err != nil {
		return err
	}
	for i := range 40 {
		if _, err := users.PublishWithKey(ctx, fmt.Sprintf("user-%03d", i), []byte(fmt.Sprintf(`{"name":"User %d","plan":"%s"}`, i, []string{"free", "pro", "team"}[i%3]))); err != nil {
			return err
		}
	}
	for i := range 3 { // keys locked before their first publish: headless
		err := st.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := users.Key(fmt.Sprintf("signup-%d", i)).LockCompactionHeadTx(ctx, tx)
			return err
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	if _, err := st.Outbox("webhooks").Enqueue(ctx, []byte(`{"event":"order.paid","order":1042}`), store.EnqueueOpts{}); err != nil {
		return err
	}
	return nil
}

// activity plays the demo hour: orders arrive in waves, emails are sent
// by a worker that fails now and then, consumers read at their own pace.
func activity(ctx context.Context, st *store.Store, play time.Duration) error {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	emails := st.Queue("emails")
	var sent atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- emails.Work(wctx, store.WorkOpts{Concurrency: 2, Visibility: time.Minute}, func(ctx context.Context, j *store.Job) error {
			time.Sleep(time.Duration(rand.IntN(4)) * time.Millisecond)
			if sent.Add(1)%9 == 0 {
				return store.Permanent(errors.New("550 mailbox unavailable: user@example.org"))
			}
			return nil
		})
	}()
	orders := st.Stream("orders")
	deadline := time.Now().Add(play)
	for step := 0; time.Now().Before(deadline); step++ {
		wave := 1 + int(6*(1+sinish(step)))
		for range wave {
			if _, err := emails.Enqueue(ctx, []byte(fmt.Sprintf(`{"to":"customer%d@example.org","template":"receipt"}`, rand.IntN(900))), store.EnqueueOpts{}); err != nil {
				return err
			}
			off, err := orders.Publish(ctx, []byte(fmt.Sprintf(`{"order":%d,"total":%d.%02d}`, 1000+step, rand.IntN(300), rand.IntN(100))))
			if err != nil {
				return err
			}
			if err := orders.SaveOffset(ctx, "billing", off-int64(rand.IntN(3))); err != nil {
				return err
			}
			if step%3 == 0 {
				if err := orders.SaveOffset(ctx, "analytics", off-int64(20+step/2)); err != nil {
					return err
				}
			}
		}
		if _, err := st.Queue("reports").Enqueue(ctx, []byte(`{"report":"daily"}`), store.EnqueueOpts{Delay: time.Hour}); err != nil {
			return err
		}
		time.Sleep(play / 160)
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	for range 25 { // a backlog for the screenshots
		if _, err := emails.Enqueue(ctx, []byte(`{"to":"late@example.org","template":"welcome"}`), store.EnqueueOpts{}); err != nil {
			return err
		}
	}
	time.Sleep(play / 40) // the console's last sample
	return nil
}

func sinish(step int) float64 {
	x := float64(step%60) / 60
	if x < .5 {
		return 4*x - 1
	}
	return 3 - 4*x
}

// shoot saves the pages as PNG files: desktop width, and the overview at
// a phone's.
func shoot(base, out string) error {
	exe := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			exe = p
			break
		}
	}
	if exe == "" {
		return errors.New("no chromium found: apt-get install -y chromium")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU)...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	defer cancel()
	deadID, err := firstDead(ctx, base)
	if err != nil {
		return err
	}
	pages := []struct {
		file, path    string
		width, height int64
		mobile        bool
	}{
		{"overview.png", "/", 1280, 900, false},
		{"queue.png", "/queues/emails?state=dead", 1280, 800, false},
		{"job.png", "/jobs/" + deadID, 1280, 800, false},
		{"stream.png", "/streams/orders", 1280, 900, false},
		{"schedules.png", "/schedules", 1280, 500, false},
		{"overview-phone.png", "/", 390, 844, true},
	}
	for _, p := range pages {
		opts := []chromedp.EmulateViewportOption{}
		if p.mobile {
			opts = append(opts, chromedp.EmulateMobile, chromedp.EmulateScale(2))
		}
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(p.width, p.height, opts...), chromedp.Navigate(base+p.path),
			chromedp.WaitVisible(chromedp.CSS("main"))); err != nil {
			return fmt.Errorf("%s: %w", p.path, err)
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, p.file), png, 0o644); err != nil {
			return err
		}
		log.Printf("wrote %s", filepath.Join(out, p.file))
	}
	return nil
}

// firstDead reads the id of a dead email job from the queue page.
func firstDead(ctx context.Context, base string) (string, error) {
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/queues/emails?state=dead"), chromedp.WaitVisible(chromedp.CSS("#jobs"))); err != nil {
		return "", err
	}
	id, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector("tr[data-job-id]") || {dataset: {jobId: "1"}}).dataset.jobId`))
	return id, err
}
