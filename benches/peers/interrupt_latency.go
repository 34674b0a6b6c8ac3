// Go's side of `interrupt_latency` (benches/benches/sleep.rs), to set beside
// spindle's in the same session. Not built by CI (it needs a Go toolchain):
//
//	apt install golang-go     # Debian's Go 1.19 will do
//	go run benches/peers/interrupt_latency.go
//
// A goroutine sleeps 10 s in a select with a channel; after it says it is
// about to sleep, the waker waits 500 µs (the sleeper's P has gone idle and
// its M has parked) and sends on the channel. The latency is from just before
// the send to the sleeper running again, as in sleep.rs, with two runtime
// threads (GOMAXPROCS=2). Two wakers:
//
//   - a goroutine, the shape of the benchmark that gave Go's 0.9 µs: Go puts
//     the woken goroutine on the waker's own P, where it runs as soon as the
//     waker blocks, with no thread to wake (tokio does the same, spindle's
//     started tasks never change threads);
//   - a goroutine locked to its OS thread (runtime.LockOSThread), the nearest
//     Go has to sleep.rs's plain-thread waker: the woken goroutine must then
//     be run by another thread, which must be woken.
//
// Percentiles are nearest-rank over every sample, as in sleep.rs.
package main

import (
	"fmt"
	"math"
	"runtime"
	"sort"
	"time"
)

const (
	rounds     = 3000
	longSleep  = 10 * time.Second
	settleTime = 500 * time.Microsecond
)

// wakes runs the rounds with the waker locked to its thread or not, and
// returns the latency of each wake.
func wakes(lockWaker bool) []time.Duration {
	entered := make(chan struct{}, 1)
	woke := make(chan time.Time, 1)
	wake := make(chan struct{}, 1)
	go func() {
		for i := 0; i < rounds; i++ {
			entered <- struct{}{}
			t := time.NewTimer(longSleep)
			select {
			case <-t.C:
				panic("lost wake")
			case <-wake:
			}
			now := time.Now()
			t.Stop()
			woke <- now
		}
	}()
	out := make(chan []time.Duration)
	go func() {
		if lockWaker {
			runtime.LockOSThread()
		}
		lat := make([]time.Duration, 0, rounds)
		for i := 0; i < rounds; i++ {
			<-entered
			time.Sleep(settleTime)
			start := time.Now()
			wake <- struct{}{}
			lat = append(lat, (<-woke).Sub(start))
		}
		out <- lat
	}()
	return <-out
}

func report(waker string, lat []time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	rank := func(p float64) time.Duration {
		r := int(math.Ceil(p * float64(len(lat))))
		if r < 1 {
			r = 1
		}
		return lat[r-1]
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	fmt.Printf("[interrupt_latency/go (%s)] n=%d p50=%.1fµs p99=%.1fµs max=%.1fµs\n",
		waker, len(lat), us(rank(0.50)), us(rank(0.99)), us(lat[len(lat)-1]))
}

func main() {
	runtime.GOMAXPROCS(2)
	for run := 0; run < 2; run++ {
		report("goroutine waker", wakes(false))
		report("locked-thread waker", wakes(true))
	}
}
