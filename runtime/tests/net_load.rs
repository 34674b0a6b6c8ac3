//! Many connections at once on a small runtime: a thousand concurrent
//! connections in lockstep, and two hundred clients whose messages come at
//! random sizes and pauses. Every byte must come back; time is not judged.

mod common;
mod net_common;

use common::rt;
use net_common::{echo_server, raise_fd_limit, BACKSTOP, LOOPBACK};
use spindle::net::{TcpListener, TcpStream};
use spindle::sync::CountdownEvent;
use spindle_testkit::{pattern, Rng};
use std::io::{Read, Write};
use std::sync::Arc;

/// Open files this binary may need: both ends of every connection of the
/// tests here, which run at once, and some to spare.
const FDS: libc::rlim_t = 4096;

/// Raises the open-file limit for the tests here, or fails saying why.
fn enough_fds() {
    let limit = raise_fd_limit(FDS);
    assert!(
        limit >= FDS,
        "RLIMIT_NOFILE is {limit} and cannot be raised to {FDS}: raise the hard limit"
    );
}

/// Guards many connections at once: 1 000 concurrent connections, all open together, each echo 20 round trips right on 2 workers.
#[test]
fn a_thousand_concurrent_connections_each_echo_twenty_round_trips() {
    const CONNS: usize = 1000;
    const ROUNDS: usize = 20;
    const LEN: usize = 32;
    enough_fds();
    let rt = rt(2);
    let listener = TcpListener::bind(LOOPBACK).unwrap();
    let addr = listener.local_addr().unwrap();
    let server = rt.spawn(move || echo_server(listener, CONNS));
    // Every client connects, then waits for all the others: the round
    // trips run with all 1 000 connections open.
    let all_connected = Arc::new(CountdownEvent::new(CONNS as u32));
    let clients: Vec<_> = (0..CONNS)
        .map(|i| {
            let all_connected = all_connected.clone();
            rt.spawn(move || {
                let mut s = TcpStream::connect(addr).expect("connect");
                s.set_read_timeout(Some(BACKSTOP)).unwrap();
                all_connected.signal(1);
                all_connected.wait().unwrap();
                let mut back = [0u8; LEN];
                for round in 0..ROUNDS {
                    let msg = pattern((i * ROUNDS + round) as u64, LEN);
                    s.write_all(&msg).unwrap();
                    s.read_exact(&mut back).unwrap();
                    assert!(
                        back[..] == msg[..],
                        "connection {i}, round {round}: changed"
                    );
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    assert_eq!(server.join().unwrap(), (CONNS * ROUNDS * LEN) as u64);
}

/// A pause of 0 to 2 ms.
fn pause(rng: &mut Rng) {
    spindle::sleep(rng.micros(0, 2000)).unwrap();
}

/// Guards echo under irregular traffic: 200 clients × 200 messages of random sizes, with random 0-2 ms pauses (some mid-message), all echoed right.
#[test]
fn two_hundred_clients_with_random_pauses_all_echo_right() {
    const CLIENTS: usize = 200;
    const MESSAGES: usize = 200;
    enough_fds();
    let rt = rt(2);
    let listener = TcpListener::bind(LOOPBACK).unwrap();
    let addr = listener.local_addr().unwrap();
    let server = rt.spawn(move || echo_server(listener, CLIENTS));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            rt.spawn(move || {
                let mut rng = Rng::new(1_000, i as u64);
                let mut s = TcpStream::connect(addr).expect("connect");
                s.set_read_timeout(Some(BACKSTOP)).unwrap();
                let mut sent = 0u64;
                for m in 0..MESSAGES {
                    let len = 1 + rng.below(256) as usize;
                    let msg = pattern(rng.next_u64(), len);
                    if len > 1 && rng.below(4) == 0 {
                        // In two writes with a pause between: the server
                        // reads the message in pieces.
                        let (head, tail) = msg.split_at(len / 2);
                        s.write_all(head).unwrap();
                        pause(&mut rng);
                        s.write_all(tail).unwrap();
                    } else {
                        s.write_all(&msg).unwrap();
                    }
                    let mut back = vec![0u8; len];
                    s.read_exact(&mut back).unwrap();
                    assert!(back == msg, "client {i}, message {m}: changed");
                    sent += len as u64;
                    pause(&mut rng);
                }
                sent
            })
        })
        .collect();
    let sent: u64 = clients.into_iter().map(|c| c.join().unwrap()).sum();
    assert_eq!(server.join().unwrap(), sent);
}
