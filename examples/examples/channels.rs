//! Lesson: channels. An `mpsc` channel carries many messages to one
//! receiver; a `oneshot` carries one reply back; `select!` takes whichever
//! of several channels has a message first, or gives up at a deadline.
//! Every wait suspends only the task.
//!
//! `cargo run --release --example channels -- 5` (requests to make, default 5)

use spindle::sync::{mpsc, oneshot};
use std::time::{Duration, Instant};

/// A request to the counter task: add `n`, and answer with the new total.
struct Add {
    n: u64,
    reply: oneshot::Sender<u64>,
}

fn main() {
    spindle_examples::init_tracing();
    let n: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("the number of requests"))
        .unwrap_or(5);
    let rt = spindle::Runtime::new().expect("start the runtime");
    rt.block_on(|| {
        // 1. A task that owns its state and serves requests from an mpsc
        // channel, each with a oneshot for its answer. `iter` ends when
        // every sender has gone.
        let (requests, inbox) = mpsc::channel::<Add>();
        let counter = spindle::spawn(move || {
            let mut total = 0;
            for Add { n, reply } in inbox.iter() {
                total += n;
                let _ = reply.send(total);
            }
            total
        });
        for i in 1..=n {
            let (reply, mut answer) = oneshot::channel();
            requests.send(Add { n: i, reply }).unwrap();
            println!("add {i}: the total is now {}", answer.recv().unwrap());
        }
        drop(requests);
        let total = counter.join().unwrap();
        println!("the counter ended with {total}");
        assert_eq!(total, n * (n + 1) / 2);

        // 2. Two producers, one fast (with a pause), one slow; the slow
        // one's end (its sender dropped) ends the loop.
        let (fast_tx, fast) = mpsc::channel::<u32>();
        let (slow_tx, slow) = mpsc::channel::<&str>();
        spindle::spawn(move || {
            for i in 0.. {
                let pause = if i == 4 { 12 } else { 2 };
                spindle::sleep(Duration::from_millis(pause)).unwrap();
                if fast_tx.send(i).is_err() {
                    return; // the receiver has gone
                }
            }
        });
        spindle::spawn(move || {
            for word in ["one", "two", "three"] {
                spindle::sleep(Duration::from_millis(10)).unwrap();
                slow_tx.send(word).unwrap();
            }
        });
        let start = Instant::now();
        loop {
            let go_on = spindle::select! {
                recv(slow) -> msg => match msg {
                    Ok(word) => { println!("{:>6.1?}  slow: {word}", start.elapsed()); true }
                    Err(_) => false, // the slow producer is done
                },
                recv(fast) -> msg => { println!("{:>6.1?}  fast: {}", start.elapsed(), msg.unwrap()); true },
                deadline(Instant::now() + Duration::from_millis(5)) => {
                    println!("{:>6.1?}  nothing for 5 ms", start.elapsed());
                    true
                },
            };
            if !go_on {
                break;
            }
        }
        println!("done after {:.1?}", start.elapsed());
    });
}
