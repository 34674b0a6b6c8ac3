// Go's side of benches/src/bin/channels.rs: the same cases, one per
// process, printing the same line. GOMAXPROCS=2, as the runtimes get two
// workers.
//
//	go run channels.go <case> <n> [budget_ms]
//
// Go's channels are bounded: pingpong_bounded1 is make(chan uint64, 1),
// pingpong_bounded0 the unbuffered make(chan uint64), and there is no
// pingpong_unbounded (value=-). The oneway cases send through a channel
// buffered to onewayBuffer, Go's nearest to an unbounded queue.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"
)

// The pinging side looks at the clock every clockEvery round trips.
const clockEvery = 256

// The oneway channel's buffer.
const onewayBuffer = 4096

func pingpong(bound int, n uint64, budget time.Duration) (uint64, time.Duration) {
	toPong := make(chan uint64, bound)
	toPing := make(chan uint64, bound)
	ponged := make(chan struct{})
	go func() {
		for v := range toPong {
			if v == 0 {
				break
			}
			toPing <- v
		}
		close(ponged)
	}()
	type result struct {
		done uint64
		t    time.Duration
	}
	res := make(chan result)
	go func() {
		t0 := time.Now()
		var done uint64
		for done < n {
			done++
			toPong <- done
			if back := <-toPing; back != done {
				panic("the token came back changed")
			}
			if done%clockEvery == 0 && time.Since(t0) > budget {
				break
			}
		}
		t := time.Since(t0)
		toPong <- 0
		res <- result{done, t}
	}()
	r := <-res
	<-ponged
	return r.done, r.t
}

func oneway(n, producers uint64) (uint64, time.Duration) {
	each := n / producers
	n = each * producers
	ch := make(chan uint64, onewayBuffer)
	type result struct {
		sum uint64
		t   time.Duration
	}
	res := make(chan result)
	t0 := time.Now()
	go func() {
		var sum uint64
		for i := uint64(0); i < n; i++ {
			sum += <-ch
		}
		res <- result{sum, time.Since(t0)}
	}()
	for p := uint64(0); p < producers; p++ {
		go func() {
			for i := uint64(0); i < each; i++ {
				ch <- i
			}
		}()
	}
	r := <-res
	var want uint64
	if each > 0 {
		want = each * (each - 1) / 2 * producers
	}
	if r.sum != want {
		panic("messages lost")
	}
	return n, r.t
}

func main() {
	runtime.GOMAXPROCS(2)
	usage := func() {
		fmt.Fprintln(os.Stderr, "usage: channels <pingpong_bounded1|pingpong_bounded0|pingpong_unbounded|oneway_1p|oneway_4p> <n> [budget_ms]")
		os.Exit(2)
	}
	if len(os.Args) < 3 || len(os.Args) > 4 {
		usage()
	}
	n, err := strconv.ParseUint(os.Args[2], 10, 64)
	if err != nil || n == 0 {
		usage()
	}
	budget := 3 * time.Second
	if len(os.Args) == 4 {
		ms, err := strconv.ParseUint(os.Args[3], 10, 64)
		if err != nil {
			usage()
		}
		budget = time.Duration(ms) * time.Millisecond
	}
	value, unit := "-", "-"
	perRT := func(done uint64, t time.Duration) {
		n = done
		value, unit = fmt.Sprintf("%.1f", float64(t.Nanoseconds())/float64(done)), "ns/rt"
	}
	perSec := func(done uint64, t time.Duration) {
		n = done
		value, unit = fmt.Sprintf("%.2f", float64(done)/t.Seconds()/1e6), "M/s"
	}
	switch os.Args[1] {
	case "pingpong_bounded1":
		perRT(pingpong(1, n, budget))
	case "pingpong_bounded0":
		perRT(pingpong(0, n, budget))
	case "pingpong_unbounded":
	case "oneway_1p":
		perSec(oneway(n, 1))
	case "oneway_4p":
		perSec(oneway(n, 4))
	default:
		usage()
	}
	fmt.Printf("case=%s system=go n=%d value=%s unit=%s\n", os.Args[1], n, value, unit)
}
