package main

import (
	"flag"
	"fmt"
	"log"
	"maps"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alkstore/alkstore/internal/pgtest"
)

// CPU per job of the burn-downs, for the runs where wall clock is too
// noisy to settle a question (a shared machine): -cpu prints, on stderr,
// the bench process's CPU and allocations and the PostgreSQL cluster's CPU
// per job of each burn-down (the library's and the raw ceilings').
// -cpuprofile writes a CPU profile of the library's burn-down via Work
// alone, -memprofile its allocations, -mutexprofile its mutex contention;
// with -cpu, a publish or one-row enqueue row's metered runs profile the
// library's side too (measure one figure with -figure to profile only that
// one), and -blockprofile records its blocking. The enqueue and publish
// rows' metered runs also sample the backends' wait events every
// -waits-every (PostgreSQL).
var (
	cpuPerJob  = flag.Bool("cpu", false, "print CPU per job (this process, and the PostgreSQL cluster's) of each burn-down, enqueue, EnqueueMany, publish, keyed publish, 8 → 1 subscriber and replay read row on stderr (publish: also WAL bytes and transaction ids a job on PostgreSQL)")
	cpuProfile = flag.String("cpuprofile", "", "write a CPU profile of the burn-down via Work to this file")
	serverPid  = flag.Int("server-pid", 0, "the PostgreSQL postmaster's pid for -cpu (default: the throwaway cluster's)")
	memProfile = flag.String("memprofile", "", "write an allocation profile of the burn-down via Work to this file (every allocation sampled)")
	traceOut   = flag.String("trace", "", "write an execution trace of the burn-down via Work to this file (go tool trace: which goroutines wake which)")
	blockOut   = flag.String("blockprofile", "", "write a blocking profile (every event: channels, mutexes, selects, sync.Cond) of the library's side of a publish or enqueue row under -cpu to this file")
	waitsEvery = flag.Duration("waits-every", 20*time.Millisecond, "how often -cpu samples what the PostgreSQL backends wait for (pg_stat_activity) while a metered run lasts")
	mutexOut   = flag.String("mutexprofile", "", "write a mutex contention profile of the burn-down via Work (or of the library's side of a publish or enqueue row under -cpu) to this file")
)

// serverProbe looks at the PostgreSQL database a metered run uses. -cpu
// prints, beside the CPU, the change a job of counts (WAL bytes written,
// transaction ids begun: a publish's own, and a NOTIFY's sent in one of
// its own) and, from samples of the database's backends taken while the
// run lasts, how many were on average running a statement (on the CPU or
// waiting for it: no wait event) or waiting, by wait event; the rest of
// the run's workers were in the client's hands.
type serverProbe interface {
	counts() (wal, xid int64)
	sampleWaits() (stop func() (states map[string]float64))
}

// cpuMeter measures one burn-down's CPU from start to stop.
type cpuMeter struct {
	what           string
	client, server time.Duration
	mallocs, bytes uint64
	scheds         uint64
	probe          serverProbe // nil: none (SQLite)
	wal, xid       int64
	waits          func() map[string]float64
	reads, writes  int64 // this process's read and write system calls (round trips to the server, mostly)
	rbytes         int64 // bytes this process read (rchar: from the server, mostly)
	mutex          bool  // profiling contention (-mutexprofile)
	block          bool  // profiling blocking (-blockprofile)
	profile        *os.File
	trace          *os.File
	memRate        int // the MemProfileRate to restore, when profiling allocations
}

func startCPU(what string, profile bool) *cpuMeter {
	m := &cpuMeter{what: what}
	if profile && *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		must0(err)
		must0(pprof.StartCPUProfile(f))
		m.profile = f
	}
	if profile && *traceOut != "" {
		f, err := os.Create(*traceOut)
		must0(err)
		must0(trace.Start(f))
		m.trace = f
	}
	if profile && *memProfile != "" {
		runtime.GC()
		m.memRate, runtime.MemProfileRate = runtime.MemProfileRate, 1
	}
	if profile && *mutexOut != "" {
		runtime.SetMutexProfileFraction(1)
		m.mutex = true
	}
	if profile && *blockOut != "" {
		runtime.SetBlockProfileRate(1)
		m.block = true
	}
	m.client, m.server, m.scheds = processCPU(), clusterCPU(), scheds()
	m.mallocs, m.bytes = mallocs()
	m.reads, m.writes, m.rbytes = ioCalls()
	return m
}

// ioCalls is how many read and write system calls this process made, and
// how many bytes it read (/proc/self/io; 0 where there is none): on a
// socket each message batch pgx sends is one write, each it receives one
// read or more.
func ioCalls() (reads, writes, rbytes int64) {
	b, _ := os.ReadFile("/proc/self/io")
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ": ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "syscr":
			reads = n
		case "syscw":
			writes = n
		case "rchar":
			rbytes = n
		}
	}
	return reads, writes, rbytes
}

// withProbe makes m read p at its start and at its stop.
func (m *cpuMeter) withProbe(p serverProbe) *cpuMeter {
	if p != nil && *cpuPerJob {
		m.probe = p
		m.wal, m.xid = p.counts()
		m.waits = p.sampleWaits()
	}
	return m
}

// scheds is how many times goroutines went from runnable to running: the
// count of the runtime's scheduling latency histogram (which samples one
// transition in 8, so it is multiplied back), a measure of hand-offs
// between goroutines that does not depend on the machine's load.
func scheds() uint64 {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	var n uint64
	for _, c := range s[0].Value.Float64Histogram().Counts {
		n += c
	}
	return 8 * n
}

// mallocs is how many heap objects and bytes this process has allocated.
func mallocs() (uint64, uint64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs, ms.TotalAlloc
}

func (m *cpuMeter) stop(engine string, jobs int) {
	allocs, bytes := mallocs()
	reads, writes, rbytes := ioCalls()
	reads, writes, rbytes = reads-m.reads, writes-m.writes, rbytes-m.rbytes
	client, server, sched := processCPU()-m.client, clusterCPU()-m.server, scheds()-m.scheds
	allocs, bytes = allocs-m.mallocs, bytes-m.bytes
	if m.profile != nil {
		pprof.StopCPUProfile()
		must0(m.profile.Close())
	}
	if m.trace != nil {
		trace.Stop()
		must0(m.trace.Close())
	}
	if m.mutex {
		runtime.SetMutexProfileFraction(0)
		f, err := os.Create(*mutexOut)
		must0(err)
		must0(pprof.Lookup("mutex").WriteTo(f, 0))
		must0(f.Close())
	}
	if m.block {
		runtime.SetBlockProfileRate(0)
		f, err := os.Create(*blockOut)
		must0(err)
		must0(pprof.Lookup("block").WriteTo(f, 0))
		must0(f.Close())
	}
	if m.memRate != 0 {
		f, err := os.Create(*memProfile)
		must0(err)
		must0(pprof.Lookup("allocs").WriteTo(f, 0))
		must0(f.Close())
		runtime.MemProfileRate = m.memRate
	}
	if !*cpuPerJob {
		return
	}
	load, _ := os.ReadFile("/proc/loadavg")
	line := fmt.Sprintf("cpu %s %s: client %.1f µs/job, %.1f allocs/job, %.0f B/job, %.2f goroutine runs/job, %.2f reads (%.0f B) + %.2f writes/job",
		engine, m.what, float64(client.Microseconds())/float64(jobs), float64(allocs)/float64(jobs), float64(bytes)/float64(jobs),
		float64(sched)/float64(jobs), float64(reads)/float64(jobs), float64(rbytes)/float64(jobs), float64(writes)/float64(jobs))
	if engine == "pg" && *serverPid != 0 {
		line += fmt.Sprintf(", server %.1f µs/job", float64(server.Microseconds())/float64(jobs))
	}
	if m.probe != nil {
		states := m.waits()
		wal, xid := m.probe.counts()
		line += fmt.Sprintf(", WAL %.0f B/job, %.3f xids/job; backends in a statement:", float64(wal-m.wal)/float64(jobs),
			float64(xid-m.xid)/float64(jobs))
		for _, n := range slices.Sorted(maps.Keys(states)) {
			line += fmt.Sprintf(" %s %.2f", n, states[n])
		}
	}
	log.Printf("%s (load %s)", line, strings.Join(strings.Fields(string(load))[:3], " "))
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clusterCPU is the throwaway (or -server-pid) cluster's CPU time.
func clusterCPU() time.Duration { return pgtest.ClusterCPU(*serverPid) }
