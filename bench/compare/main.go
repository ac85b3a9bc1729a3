// Command compare runs the bench of two builds side by side and prints each
// figure's ratio new/base: `make bench-compare BASE=<rev> ONLY=<sections>`.
//
// It builds ./bench from the working tree (uncommitted changes included)
// and from BASE in a scratch `git worktree` under a temporary directory
// (removed afterwards), starts one PostgreSQL for both (each bench run
// makes its own database on it; SQLite files go to the same temporary
// directory), and runs the two builds alternately, figure by figure: base,
// new, new, base, base, new, ... for -rounds runs each, so drift on a
// shared machine falls on both. A figure's value on each side is its best
// run; beside the ratio of the bests stand the ratio of the medians, the
// range of the per-round ratios and each side's spread (max-min over
// median), so a reader sees the noise.
//
// With -median there is no base: each figure of the working tree runs
// -rounds times and prints its median and range (median.go).
//
// A build that knows -list/-figure/-json (bench/figures.go) runs one figure
// a process. A build older than that (the base, or the tree itself when
// it is checked out at an older commit to measure that commit against its
// parent) cannot, so then each section runs whole, base and new
// alternately, and figures are matched by their printed names.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alkstore/alkstore/internal/pgtest"
)

var (
	base      = flag.String("base", "", "revision to compare against (default: the merge-base of HEAD and main, or HEAD~1 when HEAD is on main)")
	only      = flag.String("only", "streams,queues,receivers,compaction,scheduling", "bench sections to compare (comma-separated)")
	rounds    = flag.Int("rounds", 4, "runs of each build per figure")
	mainBr    = flag.String("main", "main", "the branch whose merge-base with HEAD is the default base")
	figRE     = flag.String("figures", "", "compare only the figures whose name (engine, a space, the name) matches this regular expression")
	medMode   = flag.Bool("median", false, "no base: run the working tree's bench -rounds times a figure and print each figure's median and range (median.go)")
	withPeers = flag.Bool("peers", true, "with -median and the queues section, also run bench/peers -rounds times")
)

// build is one bench binary and the tree it runs in (bench/peers and
// relative paths resolve there).
type build struct {
	name, bin, dir string
	perFigure      bool
}

// sample is one figure as one run printed it.
type sample struct {
	value float64
	unit  string
	lower bool
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	benchArgs := flag.Args() // passed to every bench run, e.g. -d 1s
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	do := run
	if *medMode {
		do = runMedian
	}
	if err := do(ctx, benchArgs); err != nil {
		log.Fatal("bench-compare: ", err)
	}
}

func run(ctx context.Context, benchArgs []string) error {
	top, err := git(ctx, "", "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	rev := *base
	if rev == "" {
		if rev, err = defaultBase(ctx, top); err != nil {
			return err
		}
	}
	sha, err := git(ctx, top, "rev-parse", "--verify", rev+"^{commit}")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "alkstore-bench-compare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	wt := filepath.Join(tmp, "base")
	if _, err := git(ctx, top, "worktree", "add", "--detach", wt, sha); err != nil {
		return err
	}
	defer func() {
		// A fresh context: the run's may be cancelled (Ctrl-C) by now.
		if _, err := git(context.Background(), top, "worktree", "remove", "--force", wt); err != nil {
			log.Print(err)
		}
	}()

	fmt.Printf("base %s (%s) against the working tree %s; bench flags %q; %d runs a side\n",
		rev, sha[:12], top, strings.Join(benchArgs, " "), *rounds)
	oldB := &build{name: "base", bin: filepath.Join(tmp, "bench-base"), dir: wt}
	newB := &build{name: "new", bin: filepath.Join(tmp, "bench-new"), dir: top}
	for _, b := range []*build{oldB, newB} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", b.bin, "./bench")
		cmd.Dir, cmd.Stdout, cmd.Stderr = b.dir, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build %s: %w", b.name, err)
		}
	}

	srv, err := pgtest.Start()
	if err != nil {
		return err
	}
	defer srv.Stop()
	env := append(os.Environ(), "ALK_PG_DSN="+srv.AdminDSN(), "TMPDIR="+tmp)

	header()
	for _, sec := range strings.Split(*only, ",") {
		if slices.Contains(wholeSections, sec) {
			if err := perSection(ctx, oldB, newB, env, sec, benchArgs); err != nil {
				return err
			}
			continue
		}
		oldFigs, oldErr := list(ctx, oldB, env, sec, benchArgs)
		newFigs, newErr := list(ctx, newB, env, sec, benchArgs)
		if oldErr == nil && newErr == nil {
			if err := perFigure(ctx, oldB, newB, env, sec, benchArgs, oldFigs, newFigs); err != nil {
				return err
			}
			continue
		}
		if err := perSection(ctx, oldB, newB, env, sec, benchArgs); err != nil {
			return err
		}
	}
	return nil
}

// wholeSections print tables of their own and load their data once for all
// their figures (10^7 rows for scale), so they run whole, never a figure a
// process; a build before bench's -list skipped them would even run one
// whole to list it.
var wholeSections = []string{"scale", "retention", "console", "citus"}

// defaultBase is the merge-base of HEAD and the main branch, or HEAD~1
// when HEAD is on it (nothing to compare against otherwise).
func defaultBase(ctx context.Context, top string) (string, error) {
	mb, err := git(ctx, top, "merge-base", "HEAD", *mainBr)
	if err != nil {
		return "", err
	}
	head, err := git(ctx, top, "rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	if mb == head {
		return "HEAD~1", nil
	}
	return mb, nil
}

// list asks a build for the figures of a section; an error means the
// build predates -list.
func list(ctx context.Context, b *build, env []string, sec string, args []string) ([]string, error) {
	out, err := bench(ctx, b, env, append([]string{"-only", sec, "-list"}, args...)...)
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n"), nil
}

// perFigure runs each figure both builds know in processes of its own.
func perFigure(ctx context.Context, oldB, newB *build, env []string, sec string, args, oldFigs, newFigs []string) error {
	var missing []string
	for _, f := range newFigs {
		if !pick(f) {
			continue
		}
		if !slices.Contains(oldFigs, f) {
			missing = append(missing, f)
			continue
		}
		runs := map[string][]sample{}
		for r := range *rounds {
			for _, b := range order(r, oldB, newB) {
				out, err := bench(ctx, b, env, append([]string{"-only", sec, "-figure", f, "-json", "-peers=false"}, args...)...)
				if err != nil {
					return err
				}
				got := parseJSON(out)
				s, ok := got[f]
				if !ok {
					return fmt.Errorf("%s build printed no figure %q:\n%s", b.name, f, out)
				}
				runs[b.name] = append(runs[b.name], s)
			}
		}
		show(f, runs["new"], runs["base"])
	}
	for _, f := range oldFigs {
		if pick(f) && !slices.Contains(newFigs, f) {
			fmt.Printf("%-52s only in base\n", f)
		}
	}
	for _, f := range missing {
		fmt.Printf("%-52s only in new\n", f)
	}
	return nil
}

// perSection runs a whole section, base and new alternately, and pairs
// the figures by their printed names: for a base without -figure.
func perSection(ctx context.Context, oldB, newB *build, env []string, sec string, args []string) error {
	if !slices.Contains(wholeSections, sec) {
		fmt.Printf("(a build predates -figure: section %s runs whole, builds alternating)\n", sec)
	}
	runs := map[string]map[string][]sample{"base": {}, "new": {}}
	var names []string
	for r := range *rounds {
		for _, b := range order(r, oldB, newB) {
			out, err := bench(ctx, b, env, append([]string{"-only", sec, "-peers=false"}, args...)...)
			if err != nil {
				return err
			}
			for name, s := range parseTable(out) {
				if !slices.Contains(names, name) {
					names = append(names, name)
				}
				runs[b.name][name] = append(runs[b.name][name], s)
			}
		}
	}
	for _, n := range names {
		if !pick(n) {
			continue
		}
		switch {
		case len(runs["base"][n]) == 0:
			fmt.Printf("%-52s only in new\n", n)
		case len(runs["new"][n]) == 0:
			fmt.Printf("%-52s only in base\n", n)
		default:
			show(n, runs["new"][n], runs["base"][n])
		}
	}
	return nil
}

// pick reports whether -figures selects the figure.
func pick(name string) bool {
	return *figRE == "" || regexp.MustCompile(*figRE).MatchString(name)
}

// order alternates which build goes first: base new, new base, base new...
func order(round int, oldB, newB *build) []*build {
	if round%2 == 0 {
		return []*build{oldB, newB}
	}
	return []*build{newB, oldB}
}

func bench(ctx context.Context, b *build, env []string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, b.bin, args...)
	var stderr bytes.Buffer
	cmd.Dir, cmd.Env, cmd.Stderr = b.dir, env, &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s bench %s: %w\n%s", b.name, strings.Join(args, " "), err, stderr.Bytes())
	}
	return out, nil
}

func parseJSON(out []byte) map[string]sample {
	got := map[string]sample{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var f struct {
			Engine, Figure, Unit string
			Value                float64
			Lower                bool
		}
		if json.Unmarshal(sc.Bytes(), &f) == nil && f.Figure != "" {
			got[f.Engine+" "+f.Figure] = sample{f.Value, f.Unit, f.Lower}
		}
	}
	return got
}

// parseTable reads the figures of a section's text output, in order: its
// rows (parseRow), and in a scale table (a header "scale: cost beside N
// unrelated rows" then N=... columns) each row's cost at each N, named
// "<engine> <name> at N=<n>".
func parseTable(out []byte) func(yield func(string, sample) bool) {
	return func(yield func(string, sample) bool) {
		var sizes []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "scale: cost beside N unrelated rows") {
				sizes = nil
				for _, f := range strings.Fields(l) {
					if strings.HasPrefix(f, "N=") {
						sizes = append(sizes, f)
					}
				}
				continue
			}
			if sizes != nil {
				for name, s := range parseScaleRow(l, sizes) {
					if !yield(name, s) {
						return
					}
				}
				continue
			}
			if name, s, ok := parseRow(l); ok && !yield(name, s) {
				return
			}
		}
	}
}

// parseScaleRow reads a row of a scale table: the engine, the name, then
// the figure at the first size and, at each later one, the figure and its
// ratio to the first. A name ending "(events/s)" or "(jobs/s)" is a rate,
// any other (µs, MB) a cost.
func parseScaleRow(line string, sizes []string) func(yield func(string, sample) bool) {
	return func(yield func(string, sample) bool) {
		cols := rowSep.Split(strings.TrimSpace(line), 3)
		if len(cols) < 3 || (cols[0] != "pg" && cols[0] != "lite") {
			return
		}
		vals := strings.Fields(cols[2])
		u, lower := unitOf(cols[1])
		for i, size := range sizes {
			at := 0
			if i > 0 {
				at = 2*i - 1 // after the first size, a figure and its ratio
			}
			if at >= len(vals) {
				return
			}
			v, err := strconv.ParseFloat(vals[at], 64)
			if err != nil {
				return
			}
			if !yield(cols[0]+" "+cols[1]+" at "+size, sample{v, u, lower}) {
				return
			}
		}
	}
}

// unitOf is the unit in a figure name's last parentheses, and whether it
// is a cost (lower is better) rather than a rate.
func unitOf(name string) (string, bool) {
	u := "/s"
	if i := strings.LastIndex(name, "("); i >= 0 && strings.HasSuffix(name, ")") {
		u = name[i+1 : len(name)-1]
	}
	return u, !strings.HasSuffix(u, "/s")
}

// parseRow reads a table row of the bench's text output: the engine, the
// name, then columns at least two spaces apart, the first of them the
// figure (a rate, "p50 <duration>" or a CPU share "<n>%").
var rowSep = regexp.MustCompile(`\s{2,}`)

func parseRow(line string) (string, sample, bool) {
	cols := rowSep.Split(strings.TrimSpace(line), -1)
	if len(cols) < 3 || (cols[0] != "pg" && cols[0] != "lite") {
		return "", sample{}, false
	}
	name, v := cols[0]+" "+cols[1], cols[2]
	switch {
	case strings.HasPrefix(v, "p50 "):
		d, err := time.ParseDuration(strings.TrimPrefix(v, "p50 "))
		return name, sample{float64(d) / 1e3, "µs p50", true}, err == nil
	case strings.HasSuffix(v, "%"):
		f, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
		return name, sample{f, "% of a core", true}, err == nil
	default:
		f, err := strconv.ParseFloat(v, 64)
		return name, sample{f, "/s", false}, err == nil
	}
}

func header() {
	fmt.Printf("%-52s %10s %10s %9s %8s  %-11s %6s %6s\n", "figure", "new", "base", "new/base", "medians", "rounds", "±new", "±base")
}

// show prints a figure: each side's best run (the highest rate, the lowest
// cost: load from other processes only ever slows a run down, so the best
// is the least disturbed) and their ratio; the ratio of the medians; the
// range of the per-round ratios (two runs side by side); and each side's
// spread, (max-min)/median.
func show(name string, nw, bs []sample) {
	nv, bv := values(nw), values(bs)
	var rr []float64
	for i := range min(len(nv), len(bv)) {
		rr = append(rr, nv[i]/bv[i])
	}
	best, note := slices.Max[[]float64], ""
	if nw[0].lower {
		best, note = slices.Min[[]float64], "  ("+nw[0].unit+", lower is better)"
	}
	fmt.Printf("%-52s %10s %10s %9.3f %8.3f  %-11s %5.0f%% %5.0f%%%s\n", name, num(best(nv)), num(best(bv)),
		best(nv)/best(bv), median(nv)/median(bv), fmt.Sprintf("%.2f–%.2f", slices.Min(rr), slices.Max(rr)),
		spread(nv), spread(bv), note)
}

func values(ss []sample) []float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = s.value
	}
	return v
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func spread(v []float64) float64 {
	return (slices.Max(v) - slices.Min(v)) / median(v) * 100
}

func num(v float64) string {
	if v >= 100 || v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}
