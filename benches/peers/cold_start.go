// Go's side of benches/src/bin/cold_start.rs: the same cases, one per
// process, printing the same line. GOMAXPROCS=2, as the runtimes get two
// workers.
//
//	go run cold_start.go <sleepers|spawn_join_task|spawn_join_thread> <n>
//
// Go has no plain threads apart from goroutines: the _thread cases spawn
// from main's goroutine locked to its OS thread, the _task cases from a
// goroutine of its own. Go has no join handles either: spawn_join is the
// same program as spawn_wait, goroutines counted down on a sync.WaitGroup.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func rss() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb * 1024
		}
	}
	panic("no VmRSS")
}

var sink atomic.Uint64

func spawnJoin(n int) time.Duration {
	t0 := time.Now()
	var wg sync.WaitGroup
	wg.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			sink.Add(0)
			wg.Done()
		}()
	}
	wg.Wait()
	return time.Since(t0)
}

func main() {
	runtime.GOMAXPROCS(2)
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: cold_start <sleepers|spawn_join_task|spawn_join_thread|spawn_wait_task|spawn_wait_thread> <n>")
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "n must be a number")
		os.Exit(2)
	}
	base := rss()
	var wall time.Duration
	kib := "-"
	switch os.Args[1] {
	case "sleepers":
		var started atomic.Int64
		var wg sync.WaitGroup
		wg.Add(n)
		t0 := time.Now()
		for i := 0; i < n; i++ {
			go func() {
				started.Add(1)
				time.Sleep(time.Second)
				wg.Done()
			}()
		}
		for started.Load() < int64(n) {
			time.Sleep(time.Millisecond)
		}
		peak := rss()
		wg.Wait()
		wall = time.Since(t0)
		kib = fmt.Sprintf("%.2f", float64(peak-base)/float64(n)/1024)
	case "spawn_join_thread", "spawn_wait_thread":
		runtime.LockOSThread()
		wall = spawnJoin(n)
	case "spawn_join_task", "spawn_wait_task":
		done := make(chan time.Duration)
		go func() { done <- spawnJoin(n) }()
		wall = <-done
	default:
		fmt.Fprintln(os.Stderr, "unknown case")
		os.Exit(2)
	}
	fmt.Printf("case=%s system=go n=%d wall_ms=%.1f ns_per_task=%.0f kib_per_task=%s\n",
		os.Args[1], n, float64(wall.Nanoseconds())/1e6, float64(wall.Nanoseconds())/float64(n), kib)
}
