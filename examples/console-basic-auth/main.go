// Command console-basic-auth is an application that mounts alkstore's web
// console in its own HTTP server, under /admin/alkstore/, behind its own
// authentication (HTTP basic auth here; use whatever your application
// already has). The console itself has no login: whoever reaches the
// handler can act, so it must only be reachable through the check.
//
//	ADMIN_PASSWORD=s3cret go run ./examples/console-basic-auth             # embedded SQLite
//	ADMIN_PASSWORD=s3cret go run ./examples/console-basic-auth postgres://user@host/db
//
// then open http://127.0.0.1:8081/admin/alkstore/ (user admin). With
// -once it checks itself (one request without and one with credentials)
// and exits.
package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/alkstore/alkstore/console"
	"github.com/alkstore/alkstore/examples/internal/example"
	"github.com/alkstore/alkstore/store"
)

var (
	addr = flag.String("addr", "127.0.0.1:8081", "address to serve on")
	once = flag.Bool("once", false, "check the mounted console and exit")
)

func main() {
	flag.Parse()
	os.Args = append(os.Args[:1], flag.Args()...) // the DSN, if any, for example.Main
	example.Main(run)
}

func run(ctx context.Context, dsn string) error {
	password := os.Getenv("ADMIN_PASSWORD")
	if password == "" {
		if !*once {
			return errors.New("set ADMIN_PASSWORD: the console must not be served without a password")
		}
		password = "example-only"
	}
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.Queue("emails").Enqueue(ctx, []byte(`{"to":"ada@example.com"}`), store.EnqueueOpts{}); err != nil {
		return err
	}

	// The console, mounted under a prefix of the application's own mux.
	c := console.New(st, console.Options{Prefix: "/admin/alkstore"})
	defer c.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "the application") })
	mux.Handle("/admin/alkstore/", requireAdmin("admin", password, c))

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/admin/alkstore/"

	if *once {
		return check(url, password)
	}
	log.Printf("console on %s (user admin); Ctrl-C to stop", url)
	sig, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	<-sig.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.Close() // ends live connections first, so Shutdown need not wait for them
	return srv.Shutdown(sctx)
}

// requireAdmin is the application's own check, in front of the console.
func requireAdmin(user, password string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 ||
			subtle.ConstantTimeCompare([]byte(p), []byte(password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="admin", charset="UTF-8"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// check fetches the overview without and with credentials.
func check(url, password string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	fmt.Println("without credentials:", resp.Status)
	if resp.StatusCode != http.StatusUnauthorized {
		return fmt.Errorf("the console answered without credentials: %s", resp.Status)
	}
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.SetBasicAuth("admin", password)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println("with credentials:", resp.Status)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `href="/admin/alkstore/queues/emails"`) {
		return fmt.Errorf("the overview did not list the emails queue under the prefix: %s", resp.Status)
	}
	return nil
}
