package pgtest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ClusterCPU is the CPU time of the PostgreSQL cluster whose postmaster is
// pid (0: none, 0 s): the postmaster's own and its reaped children's, and
// its live children's, so backends that ended inside a measured window
// count once the postmaster reaped them. Linux only (/proc); for the
// benches' CPU per operation.
func ClusterCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	var ticks int64
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		// The fields after the command, which is in parentheses: state ppid ...
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		if len(f) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		at := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
		switch {
		case p == pid: // utime stime cutime cstime (fields 14-17, 11-14 here)
			ticks += at(11) + at(12) + at(13) + at(14)
		case ppid == pid:
			ticks += at(11) + at(12)
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond // CLK_TCK is 100 on Linux
}
