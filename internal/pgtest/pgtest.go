// Package pgtest gives tests and benchmarks a PostgreSQL server: the one
// ALK_PG_DSN names, or a throwaway cluster started from the installed server
// binaries, listening only on a Unix socket in a temporary directory and
// removed on Stop, or by a later run's Sweep if this one ends without Stop.
package pgtest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Server is a PostgreSQL server tests may create databases on.
type Server struct {
	adminDSN string // a DSN for the maintenance database
	dir      string // the throwaway cluster's directory; empty for ALK_PG_DSN
	cmd      *exec.Cmd
	seq      atomic.Int64

	mu      sync.Mutex // guards created: parallel tests create databases
	created []string

	// admin is the connection to the maintenance database that creates
	// and drops databases, kept from one to the next: a connection costs
	// the server a backend's start and exit, about 35 ms of CPU on the
	// 2-core VM (a run of the tests creates some 450 databases), where
	// CREATE DATABASE from a migrated template costs about 80.
	adminMu sync.Mutex
	admin   *pgx.Conn
}

// ErrNoServer says neither ALK_PG_DSN nor server binaries are available.
var ErrNoServer = errors.New("pgtest: no PostgreSQL: set ALK_PG_DSN to a server tests may create databases on, " +
	"or install the server binaries (apt-get install postgresql; .ci/run does this)")

// Start returns the ALK_PG_DSN server, or starts a throwaway cluster.
func Start() (*Server, error) {
	return start(os.TempDir())
}

// StartForTests is Start for behaviour tests: a throwaway cluster runs
// without autovacuum. Its ANALYZE transactions (of pg_class in every new
// test database, of a test's busy tables) take transaction ids, and the
// settled stream horizon is cluster-wide, so each held every database's
// horizon for a moment: a test reading its own events right after their
// commit then read nothing, at random (TestTrimTo/pg and
// TestStoreTxHandsItsDriverTxToSqlc/pg failed so). Tests that need
// statistics run ANALYZE themselves. An ALK_PG_DSN server is left as it is.
// The cluster is made in clusterBase(): a tmpfs unless TMPDIR is set.
// (Benchmarks' clusters, which may hold millions of rows, stay in TMPDIR.)
func StartForTests() (*Server, error) {
	return start(clusterBase(), "-c", "autovacuum=off")
}

// start starts a throwaway cluster in a directory made in base, unless
// ALK_PG_DSN names a server.
func start(base string, settings ...string) (*Server, error) {
	if dsn := os.Getenv("ALK_PG_DSN"); dsn != "" {
		return &Server{adminDSN: dsn}, nil
	}
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	return startCluster(bin, base, settings...)
}

// binDir finds initdb and postgres: the newest /usr/lib/postgresql/*/bin,
// else pg_config --bindir.
func binDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if isExec(filepath.Join(d, "initdb")) {
			return d, nil
		}
	}
	return "", ErrNoServer
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode()&0o111 != 0
}

func startCluster(bin, base string, settings ...string) (*Server, error) {
	dir, err := tempDirIn(base, "alkstore-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir}
	cred, err := clusterCred()
	if err != nil {
		s.Stop()
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			s.Stop()
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	if err := initData(bin, data, cred); err != nil {
		s.Stop()
		return nil, err
	}
	args := append([]string{"-D", data, "-k", dir,
		"-c", "listen_addresses=", "-c", "max_connections=300",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"}, settings...)
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), args...)
	// It dies with this process however that ends (SIGKILL, a test's panic,
	// go test -timeout): SIGQUIT, an immediate shutdown.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err == nil {
		s.cmd.Stdout, s.cmd.Stderr = logf, logf
	}
	if err := s.cmd.Start(); err != nil {
		s.Stop()
		return nil, fmt.Errorf("pgtest: start postgres: %w", err)
	}
	s.adminDSN = "postgres://postgres@/postgres?host=" + url.QueryEscape(dir)
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := pgx.Connect(context.Background(), s.adminDSN)
		if err == nil {
			conn.Close(context.Background())
			return s, nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			s.Stop()
			return nil, fmt.Errorf("pgtest: postgres did not accept connections: %w\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clusterCred is the user a throwaway cluster runs as: nil, this
// process's, unless it runs as root, which initdb refuses: then postgres.
func clusterCred() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root needs a postgres user to own the cluster: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// initdbArgs are initdb's arguments after -D.
var initdbArgs = []string{"-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"}

// initData makes data a new cluster's data directory, owned by cred's
// user (nil: this process's): a copy of the one initdb made for an
// earlier cluster of the same binaries and user, kept in TMPDIR
// (alkstore-initdb-*), or, the first time, initdb's output, which is kept
// for the next. initdb costs about 1.1 s of CPU on the 2-core VM and a
// copy about a tenth of that; make test starts some twenty clusters.
func initData(bin, data string, cred *syscall.Credential) error {
	kept, err := initdbKept(bin, cred)
	if err != nil {
		return err
	}
	if _, err := os.Stat(kept); err != nil {
		if err := initdb(bin, data, cred); err != nil {
			return err
		}
		// Kept by a rename of a copy made in a directory of this
		// process's (swept if it ends meanwhile): another process starting
		// a cluster finds it whole or not at all. If the copy fails, the
		// next cluster runs initdb again.
		if tmp, err := TempDir("alkstore-initdb-new-"); err == nil {
			if exec.Command("cp", "-a", data, filepath.Join(tmp, "data")).Run() == nil {
				_ = os.Rename(filepath.Join(tmp, "data"), kept) // unless another process kept its own first
			}
			RemoveTempDir(tmp)
		}
		return nil
	}
	if out, err := exec.Command("cp", "-a", kept, data).CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: copy %s: %w\n%s", kept, err, out)
	}
	return nil
}

// ShareInitdb makes the initdb output this process keeps (initData) kept
// in tmp too, as hard links when it can (a copy else), so that a process
// started with TMPDIR=tmp copies it for its clusters instead of running
// initdb (about 1.1 s of CPU each on the 2-core VM). It does nothing when
// there is none to share: an ALK_PG_DSN run, or no cluster started yet.
func ShareInitdb(tmp string) error {
	if os.Getenv("ALK_PG_DSN") != "" {
		return nil
	}
	bin, err := binDir()
	if err != nil {
		return err
	}
	cred, err := clusterCred()
	if err != nil {
		return err
	}
	kept, err := initdbKept(bin, cred)
	if err != nil {
		return err
	}
	if _, err := os.Stat(kept); err != nil {
		return nil
	}
	to := filepath.Join(tmp, filepath.Base(kept))
	if exec.Command("cp", "-al", kept, to).Run() == nil {
		return nil
	}
	_ = os.RemoveAll(to)
	if out, err := exec.Command("cp", "-a", kept, to).CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: copy %s: %w\n%s", kept, err, out)
	}
	return nil
}

// initdbKept names the directory initData keeps initdb's output in, for
// these binaries (their path, size and time) and user.
func initdbKept(bin string, cred *syscall.Credential) (string, error) {
	h := sha256.New()
	fmt.Fprintln(h, bin, initdbArgs, os.Geteuid())
	if cred != nil {
		fmt.Fprintln(h, cred.Uid, cred.Gid)
	}
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(bin, name))
		if err != nil {
			return "", err
		}
		fmt.Fprintln(h, name, fi.Size(), fi.ModTime().UnixNano())
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("alkstore-initdb-%x", h.Sum(nil)[:8])), nil
}

func initdb(bin, data string, cred *syscall.Credential) error {
	cmd := exec.Command(filepath.Join(bin, "initdb"), append([]string{"-D", data}, initdbArgs...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	return nil
}

// NewDatabase creates an empty database and returns a DSN for it.
func (s *Server) NewDatabase(ctx context.Context) (string, error) {
	return s.newDatabase(ctx, "template0")
}

// CopiesDatabases reports whether NewDatabaseFrom works: not when
// ALK_PG_CREATEDB creates the databases (Citus, whose workers a copy would
// not reach).
func (s *Server) CopiesDatabases() bool {
	return len(strings.Fields(os.Getenv(CreateDBEnv))) == 0
}

// NewDatabaseFrom creates a database as a copy of the database behind
// templateDSN (one this server created; CREATE DATABASE ... TEMPLATE copies
// its files, so no one may be connected to it) and returns a DSN for the
// copy. Tests copy a migrated database instead of migrating each of their
// own.
func (s *Server) NewDatabaseFrom(ctx context.Context, templateDSN string) (string, error) {
	if !s.CopiesDatabases() {
		return "", fmt.Errorf("pgtest: %s creates the databases: they cannot be copied", CreateDBEnv)
	}
	u, err := url.Parse(templateDSN)
	if err != nil {
		return "", err
	}
	return s.newDatabase(ctx, strings.TrimPrefix(u.Path, "/"))
}

// newDatabase creates a database as a copy of template.
func (s *Server) newDatabase(ctx context.Context, template string) (string, error) {
	name := fmt.Sprintf("alk_test_%d_%d", os.Getpid(), s.seq.Add(1))
	if cmd := strings.Fields(os.Getenv(CreateDBEnv)); len(cmd) > 0 {
		if out, err := exec.CommandContext(ctx, cmd[0], append(cmd[1:], name)...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("pgtest: %s %s: %w\n%s", CreateDBEnv, name, err, out)
		}
	} else if err := s.createDatabase(ctx, name, template); err != nil {
		return "", err
	}
	s.mu.Lock()
	s.created = append(s.created, name)
	s.mu.Unlock()
	u, err := url.Parse(s.adminDSN)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// DropDatabase drops a database NewDatabase created (dsn is the DSN it
// returned), ending its sessions: a benchmark that compares runs drops a
// peer's database before the next run, so that its autovacuum does not run
// beside them.
func (s *Server) DropDatabase(ctx context.Context, dsn string) error {
	u, err := url.Parse(dsn)
	if err != nil {
		return err
	}
	name := strings.TrimPrefix(u.Path, "/")
	s.mu.Lock()
	i := slices.Index(s.created, name)
	if i >= 0 {
		s.created = slices.Delete(s.created, i, i+1)
	}
	s.mu.Unlock()
	if i < 0 {
		return fmt.Errorf("pgtest: database %q was not created here", name)
	}
	return s.adminExec(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		return err
	})
}

// DropDatabasesBut drops every database NewDatabase or NewDatabaseFrom
// created on this server but those keep names (DSNs they returned),
// ending their sessions: a test run drops each test's databases when the
// test ends, so that a throwaway cluster in memory (clusterBase) holds a
// few at a time, not the run's hundreds.
func (s *Server) DropDatabasesBut(ctx context.Context, keep ...string) error {
	kept := map[string]bool{}
	for _, dsn := range keep {
		if u, err := url.Parse(dsn); err == nil && dsn != "" {
			kept[strings.TrimPrefix(u.Path, "/")] = true
		}
	}
	s.mu.Lock()
	var drop []string
	s.created = slices.DeleteFunc(s.created, func(name string) bool {
		if kept[name] {
			return false
		}
		drop = append(drop, name)
		return true
	})
	s.mu.Unlock()
	if len(drop) == 0 {
		return nil
	}
	return s.adminExec(ctx, func(conn *pgx.Conn) error {
		for _, name := range drop {
			if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
				return fmt.Errorf("pgtest: drop database %s: %w", name, err)
			}
		}
		return nil
	})
}

// CreateDBEnv names a command that creates a test database instead of
// CREATE DATABASE; NewDatabase appends the name. Citus does not propagate
// CREATE DATABASE to its workers, so `make test-citus` sets it to
// `cluster.sh createdb DIR`, which creates the database with the extension
// on every node and registers the workers.
const CreateDBEnv = "ALK_PG_CREATEDB"

func (s *Server) createDatabase(ctx context.Context, name, template string) error {
	return s.adminExec(ctx, func(conn *pgx.Conn) error {
		stmt := "CREATE DATABASE " + name + " TEMPLATE " + pgx.Identifier{template}.Sanitize()
		if template != "template0" && serverMajor(conn) >= 15 {
			// A copy of a database in use (WAL_LOG, the default) logs every
			// page of it; FILE_COPY copies its files between two checkpoints,
			// which the tests' cluster (fsync off) makes cheap: 0.1-0.4 s
			// against 0.05-1.7 s under load.
			stmt += " STRATEGY FILE_COPY"
		}
		_, err := conn.Exec(ctx, stmt)
		return err
	})
}

// adminExec runs fn on the admin connection (one fn at a time), connecting
// first if there is none or a test ended it (a test may terminate every
// session on its server). A statement that failed before it reached the
// server is tried once more on a new connection.
func (s *Server) adminExec(ctx context.Context, fn func(*pgx.Conn) error) error {
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	for try := 0; ; try++ {
		if s.admin == nil || s.admin.IsClosed() {
			conn, err := pgx.Connect(ctx, s.adminDSN)
			if err != nil {
				return err
			}
			s.admin = conn
		}
		err := fn(s.admin)
		if err == nil || try > 0 || !s.admin.IsClosed() && !pgconn.SafeToRetry(err) {
			return err
		}
		s.admin.Close(ctx)
		s.admin = nil
	}
}

// closeAdmin closes the admin connection, if any.
func (s *Server) closeAdmin() {
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	if s.admin != nil {
		s.admin.Close(context.Background())
		s.admin = nil
	}
}

// serverMajor is the server's major version (0 when unknown).
func serverMajor(conn *pgx.Conn) int {
	v := conn.PgConn().ParameterStatus("server_version")
	n, _ := strconv.Atoi(strings.SplitN(strings.SplitN(v, ".", 2)[0], " ", 2)[0])
	return n
}

// AdminDSN is a DSN for the server's maintenance database.
func (s *Server) AdminDSN() string { return s.adminDSN }

// Pid is the throwaway cluster's postmaster process id (0 for an
// ALK_PG_DSN server): benchmarks read the server's CPU from it and its
// children.
func (s *Server) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Stop drops the databases it created on an ALK_PG_DSN server, or stops the
// throwaway cluster and removes its directory.
func (s *Server) Stop() {
	if s.dir == "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		_ = s.adminExec(context.Background(), func(conn *pgx.Conn) error {
			for _, name := range s.created {
				_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			}
			return nil
		})
		s.closeAdmin()
		return
	}
	s.closeAdmin()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
	}
	RemoveTempDir(s.dir)
}

// Dir is the throwaway cluster's directory (its socket's too), or empty
// for an ALK_PG_DSN server.
func (s *Server) Dir() string { return s.dir }
