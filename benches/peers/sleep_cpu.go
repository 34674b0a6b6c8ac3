// Go's side of benches/src/bin/sleep_cpu.rs: n goroutines each looping over
// time.Sleep(d); after a second to settle, the process's CPU time
// (getrusage) over secs seconds per sleep completed then, and how late the
// sleeps ended. GOMAXPROCS=2, as the runtimes get two workers.
//
//	go run sleep_cpu.go <n> <d_us> <secs>
package main

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Lateness samples, as in sleep_cpu.rs: 100 000 in all shared out over the
// tasks (at least 64 each), from the sleeps that end once the load has
// settled.
const (
	samples           = 100_000
	minSamplesPerTask = 64
)

func cpuTime() time.Duration {
	var u syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

func main() {
	runtime.GOMAXPROCS(2)
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: sleep_cpu <n> <d_us> <secs>")
		os.Exit(2)
	}
	var args [3]int
	for i := range args {
		v, err := strconv.Atoi(os.Args[i+1])
		if err != nil || v < 0 {
			fmt.Fprintln(os.Stderr, "usage: sleep_cpu <n> <d_us> <secs>: whole numbers, not", os.Args[i+1])
			os.Exit(2)
		}
		args[i] = v
	}
	n, dus, secs := args[0], args[1], args[2]
	d := time.Duration(dus) * time.Microsecond
	perTask := minSamplesPerTask
	if n > 0 && samples/n > perTask {
		perTask = samples / n
	}
	var stop, measuring atomic.Bool
	var completed atomic.Uint64
	var mu sync.Mutex
	var late []int64
	var wg sync.WaitGroup
	wg.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			mine := make([]int64, 0, minSamplesPerTask)
			for !stop.Load() {
				deadline := time.Now().Add(d)
				time.Sleep(d)
				l := time.Since(deadline)
				completed.Add(1)
				if measuring.Load() && len(mine) < perTask {
					mine = append(mine, l.Nanoseconds())
				}
			}
			mu.Lock()
			late = append(late, mine...)
			mu.Unlock()
			wg.Done()
		}()
	}
	time.Sleep(time.Second)
	measuring.Store(true)
	c0, t0, s0 := cpuTime(), time.Now(), completed.Load()
	time.Sleep(time.Duration(secs) * time.Second)
	c1, t1, s1 := cpuTime(), time.Now(), completed.Load()
	stop.Store(true)
	wg.Wait()
	sort.Slice(late, func(a, b int) bool { return late[a] < late[b] })
	pct := func(p float64) float64 {
		if len(late) == 0 {
			return 0
		}
		return float64(late[int(float64(len(late)-1)*p)]) / 1e3
	}
	sleeps := s1 - s0
	if sleeps == 0 {
		sleeps = 1
	}
	cpu := c1 - c0
	fmt.Printf("system=go n=%d d_us=%d sleeps=%d cpu_us_per_sleep=%.2f cores=%.3f late_p50_us=%.1f late_p99_us=%.1f\n",
		n, dus, s1-s0, float64(cpu.Nanoseconds())/1e3/float64(sleeps), cpu.Seconds()/t1.Sub(t0).Seconds(), pct(0.5), pct(0.99))
}
