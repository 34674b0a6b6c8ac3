// Go's side of benches/benches/runtime.rs: the same three costs per
// operation, measured the same way (whole batches, a warm-up, then samples
// whose mean is reported), GOMAXPROCS=2 as the runtimes get two workers.
//
//	go run runtime.go <spawn_join|yield|pingpong>
//
// prints one line: `case=yield system=go ns_per_op=...`.
//
//   - spawn_join: from a goroutine, 200 000 goroutines that each bump an
//     atomic counter, then waited for. Go has no join handles: the
//     goroutines count down a sync.WaitGroup (as in cold_start.go), the
//     Go idiom for waiting on many. Per task.
//   - yield: two goroutines call runtime.Gosched 1 000 000 times each; the
//     batch's wall time over both goroutines' yields. Per yield.
//   - pingpong: two goroutines hand a turn back and forth through two
//     channels of capacity 1 (the nearest Go has to a pair of Notify or of
//     butex waits). Per round trip.
package main

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

const (
	spawnBatch = 200_000
	yieldBatch = 1_000_000
	pingBatch  = 1_000_000
	warmUp     = time.Second
	samples    = 10
)

var counter atomic.Uint64

// spawnJoin runs one batch from the calling goroutine and returns its time.
func spawnJoin() time.Duration {
	before := counter.Load()
	t0 := time.Now()
	var wg sync.WaitGroup
	wg.Add(spawnBatch)
	for i := 0; i < spawnBatch; i++ {
		go func() {
			counter.Add(1)
			wg.Done()
		}()
	}
	wg.Wait()
	t := time.Since(t0)
	if counter.Load()-before != spawnBatch {
		panic("a goroutine was lost")
	}
	return t
}

// yields runs two goroutines that yield yieldBatch times each.
func yields() time.Duration {
	t0 := time.Now()
	fin := make(chan struct{})
	for i := 0; i < 2; i++ {
		go func() {
			for j := 0; j < yieldBatch; j++ {
				runtime.Gosched()
			}
			fin <- struct{}{}
		}()
	}
	<-fin
	<-fin
	return time.Since(t0)
}

// pingpong hands a turn back and forth pingBatch times.
func pingpong() time.Duration {
	ping, pong := make(chan struct{}, 1), make(chan struct{}, 1)
	fin := make(chan struct{})
	go func() {
		for range ping {
			pong <- struct{}{}
		}
		close(fin)
	}()
	t0 := time.Now()
	for i := 0; i < pingBatch; i++ {
		ping <- struct{}{}
		<-pong
	}
	t := time.Since(t0)
	close(ping)
	<-fin
	return t
}

func main() {
	runtime.GOMAXPROCS(2)
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: runtime <spawn_join|yield|pingpong>")
		os.Exit(2)
	}
	var batch func() time.Duration
	var ops float64
	switch os.Args[1] {
	case "spawn_join":
		batch, ops = spawnJoin, spawnBatch
	case "yield":
		batch, ops = yields, 2*yieldBatch
	case "pingpong":
		batch, ops = pingpong, pingBatch
	default:
		fmt.Fprintln(os.Stderr, "usage: runtime <spawn_join|yield|pingpong>")
		os.Exit(2)
	}
	// Run on a goroutine, as the Rust cases run inside a task.
	out := make(chan float64)
	go func() {
		for t0 := time.Now(); time.Since(t0) < warmUp; {
			batch()
		}
		var total time.Duration
		for i := 0; i < samples; i++ {
			total += batch()
		}
		out <- float64(total.Nanoseconds()) / (samples * ops)
	}()
	fmt.Printf("case=%s system=go ns_per_op=%.1f\n", os.Args[1], <-out)
}
