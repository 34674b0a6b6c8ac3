// Go's side of the `echo` benchmark (benches/echo.sh): a goroutine per
// connection, each echoing what it reads through a 4 KiB buffer (the
// BUF_SIZE of the Rust servers in benches/src/echo.rs), with TCP_NODELAY
// (Go's default). Not built by CI (it needs a Go toolchain):
//
//	apt install golang-go     # Debian's Go 1.19 will do
//	GOMAXPROCS=2 go run benches/peers/echo_server.go --addr 127.0.0.1:0
//
// echo.sh builds it with `go build` and runs it with GOMAXPROCS=2, the
// same two runtime threads as the Rust runtimes' workers. It prints
// "listening ADDR" once bound. Go raises its own open-file limit to the
// hard limit at start (since Go 1.19).
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
)

// bufSize matches BUF_SIZE in benches/src/echo.rs.
const bufSize = 4096

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stdout, "listening %s\n", ln.Addr())
	for {
		conn, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go echo(conn)
	}
}

// echo echoes until the peer closes; an error ends only this connection.
func echo(conn net.Conn) {
	defer conn.Close()
	buf := make([]byte, bufSize)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			if _, werr := conn.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
