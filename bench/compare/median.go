package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/alkstore/alkstore/internal/pgtest"
)

// The median mode (-median, `make bench-median`): the working tree's bench
// alone, each figure in -rounds processes of its own, one after the other,
// printing each figure's median and range and the median and range of its
// ratio to what it is measured against (raw SQL, or the figure the bench
// names beside it). With the queues section, bench/peers runs -rounds
// times too, each run right after a run of alkstore's figures it is
// compared on, and the peer ratios are the medians of those pairs' ratios.
// This is the "median of three runs" the goals are stated in.

// run1 is one figure as one run printed it, with what it stands beside.
type run1 struct {
	value, ceiling float64
	unit, beside   string
	lower          bool
}

func runMedian(ctx context.Context, benchArgs []string) error {
	top, err := git(ctx, "", "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "alkstore-bench-median-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	head, _ := git(ctx, top, "rev-parse", "--short=12", "HEAD")
	fmt.Printf("the working tree %s (HEAD %s); bench flags %q; %d runs a figure, medians and ranges\n",
		top, head, strings.Join(benchArgs, " "), *rounds)
	b := &build{name: "new", bin: filepath.Join(tmp, "bench"), dir: top}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", b.bin, "./bench")
	cmd.Dir, cmd.Stdout, cmd.Stderr = b.dir, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	srv, err := pgtest.Start()
	if err != nil {
		return err
	}
	defer srv.Stop()
	env := append(os.Environ(), "ALK_PG_DSN="+srv.AdminDSN(), "TMPDIR="+tmp)

	fmt.Printf("%-52s %10s  %-19s %12s %7s  %-11s\n", "figure", "median", "range", "beside", "ratio", "ratio range")
	medians := map[string]float64{}
	for _, sec := range strings.Split(*only, ",") {
		if slices.Contains(wholeSections, sec) {
			if err := sectionMedians(ctx, b, env, sec, benchArgs); err != nil {
				return err
			}
			continue
		}
		figs, err := list(ctx, b, env, sec, benchArgs)
		if err != nil {
			return err
		}
		for _, f := range figs {
			if f == "" || !pick(f) {
				continue
			}
			// A run may print figures beside the one asked for (the
			// burn-down's second ceiling): they are shown after it.
			runs := map[string][]run1{}
			var names []string
			for range *rounds {
				out, err := bench(ctx, b, env, append([]string{"-only", sec, "-figure", f, "-json", "-peers=false"}, benchArgs...)...)
				if err != nil {
					return err
				}
				got := parseRun(out)
				if _, ok := got[f]; !ok {
					return fmt.Errorf("the bench printed no figure %q:\n%s", f, out)
				}
				for name, r := range got {
					if !slices.Contains(names, name) {
						names = append(names, name)
					}
					runs[name] = append(runs[name], r)
				}
			}
			slices.Sort(names)
			medians[f] = showMedian(f, runs[f])
			for _, name := range names {
				if name != f {
					medians[name] = showMedian(name, runs[name])
				}
			}
		}
	}
	if *withPeers && slices.Contains(strings.Split(*only, ","), "queues") {
		return peerMedians(ctx, b, env, srv, tmp, top, benchArgs, medians)
	}
	return nil
}

// sectionMedians runs a whole section (wholeSections) -rounds times and
// prints each figure of its tables (parseTable) with its median and range.
func sectionMedians(ctx context.Context, b *build, env []string, sec string, benchArgs []string) error {
	runs := map[string][]run1{}
	var names []string
	for range *rounds {
		out, err := bench(ctx, b, env, append([]string{"-only", sec, "-peers=false"}, benchArgs...)...)
		if err != nil {
			return err
		}
		for name, s := range parseTable(out) {
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
			runs[name] = append(runs[name], run1{value: s.value, unit: s.unit, lower: s.lower})
		}
	}
	for _, name := range names {
		if pick(name) {
			showMedian(name, runs[name])
		}
	}
	return nil
}

func parseRun(out []byte) map[string]run1 {
	got := map[string]run1{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var f struct {
			Engine, Figure, Unit, Beside string
			Value, Ceiling               float64
			Lower                        bool
		}
		if json.Unmarshal(sc.Bytes(), &f) == nil && f.Figure != "" {
			got[f.Engine+" "+f.Figure] = run1{f.Value, f.Ceiling, f.Unit, f.Beside, f.Lower}
		}
	}
	return got
}

// showMedian prints a figure's median and range; beside a ceiling, the
// ceiling's median and the median and range of the per-run ratios (each
// run's figure over the ceiling measured in the same run). A p99 beside a
// p50 is shown as its median, without a ratio. It returns the median.
func showMedian(name string, runs []run1) float64 {
	v := make([]float64, len(runs))
	var c, r []float64
	for i, x := range runs {
		v[i] = x.value
		if x.ceiling != 0 {
			c = append(c, x.ceiling)
			r = append(r, x.value/x.ceiling)
		}
	}
	rng := fmt.Sprintf("%s–%s", num(slices.Min(v)), num(slices.Max(v)))
	line := fmt.Sprintf("%-52s %10s  %-19s", name, num(median(v)), rng)
	switch {
	case len(c) == 0:
	case runs[0].beside == "p99":
		line += fmt.Sprintf(" %12s", "p99 "+num(median(c)))
	default:
		line += fmt.Sprintf(" %12s %7.2f  %.2f–%.2f", num(median(c)), median(r), slices.Min(r), slices.Max(r))
	}
	if runs[0].lower {
		line += "  (" + runs[0].unit + ", lower is better)"
	}
	fmt.Println(line)
	return median(v)
}

// peerMedians runs bench/peers -rounds times (each on a fresh database and
// SQLite directory, both removed after the run), each paired with one more
// run of alkstore's figures the peers are compared on (alkstore first in
// even pairs, the peers first in odd ones), and prints the median of each
// side and of the pairs' ratios. A pair runs within a minute or two: the medians of the
// section runs above were taken up to twenty minutes earlier, and a shared
// machine's speed drifts more than that (stop 41 saw the raw ceilings fall
// a third between a morning and an afternoon run while River's burn-down,
// measured at the end, rose a fifth).
func peerMedians(ctx context.Context, b *build, env []string, srv *pgtest.Server, tmp, top string, benchArgs []string, selected map[string]float64) error {
	jobs, workers, d := "100000", "100", "2s"
	for i := 0; i+1 < len(benchArgs); i++ { // the bench's own flags the peers share
		switch strings.TrimLeft(benchArgs[i], "-") {
		case "jobs":
			jobs = benchArgs[i+1]
		case "workers":
			workers = benchArgs[i+1]
		case "d":
			d = benchArgs[i+1]
		}
	}
	figs := []struct{ ours, their string }{
		{"enqueue, 1 producer(s) (jobs/s)", "insert"},
		{"EnqueueMany of 1,000 (jobs/s)", "insert_many_1000"},
		{"burn-down of " + jobs + " via Work (jobs/s)", "burndown"},
	}
	var ourFigs []string // the figures picked above that a peer is compared on
	for _, f := range figs {
		for _, engine := range []string{"pg ", "lite "} {
			if _, ok := selected[engine+f.ours]; ok {
				ourFigs = append(ourFigs, engine+f.ours)
			}
		}
	}
	if len(ourFigs) == 0 {
		return nil
	}
	ours, theirs := map[string][]float64{}, map[string][]float64{}
	runOurs := func() error {
		for _, f := range ourFigs {
			out, err := bench(ctx, b, env, append([]string{"-only", "queues", "-figure", f, "-json", "-peers=false"}, benchArgs...)...)
			if err != nil {
				return err
			}
			for name, r := range parseRun(out) {
				ours[name] = append(ours[name], r.value)
			}
		}
		return nil
	}
	runPeers := func(k int) error {
		dsn, err := srv.NewDatabase(ctx)
		if err != nil {
			return err
		}
		dir := filepath.Join(tmp, fmt.Sprint("peers", k))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, "go", "run", ".", "-dsn", dsn, "-sqlite-dir", dir, "-jobs", jobs, "-workers", workers, "-d", d)
		cmd.Dir, cmd.Stderr = filepath.Join(top, "bench", "peers"), os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("bench/peers: %w", err)
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			var f struct {
				Name string
				Rate float64
			}
			if dec.Decode(&f) != nil {
				break
			}
			theirs[f.Name] = append(theirs[f.Name], f.Rate)
		}
		// The peers' tables go before the next run, so that no autovacuum
		// of theirs runs beside it.
		if err := srv.DropDatabase(ctx, dsn); err != nil {
			return err
		}
		return os.RemoveAll(dir)
	}
	for k := range *rounds {
		// Odd pairs run the peers first: whichever runs second follows the
		// other's burn-down on the same server and disk.
		first, second := runOurs, func() error { return runPeers(k) }
		if k%2 == 1 {
			first, second = second, first
		}
		if err := first(); err != nil {
			return err
		}
		if err := second(); err != nil {
			return err
		}
	}
	fmt.Printf("\n%-52s %10s %10s %7s  %-11s  %s\n", "versus a peer (runs in pairs)", "alkstore", "peer", "ratio", "ratio range", "peer range")
	for _, p := range []struct{ engine, peer string }{{"pg", "river"}, {"lite", "river_sqlite"}, {"lite", "goqite"}} {
		for _, f := range figs {
			a, t := ours[p.engine+" "+f.ours], theirs[p.peer+" "+f.their]
			if len(a) == 0 || len(a) != len(t) {
				continue
			}
			r := make([]float64, len(a))
			for i := range a {
				r[i] = a[i] / t[i]
			}
			fmt.Printf("%-52s %10s %10s %7.2f  %.2f–%.2f  %s–%s\n", p.engine+" "+f.ours+" / "+p.peer, num(median(a)), num(median(t)),
				median(r), slices.Min(r), slices.Max(r), num(slices.Min(t)), num(slices.Max(t)))
		}
	}
	return nil
}
