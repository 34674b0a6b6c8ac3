use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
static STARTED: AtomicU64 = AtomicU64::new(0);
static WOKEN: AtomicU64 = AtomicU64::new(0);
const N: u64 = 100_000;
fn main() {
    let nap: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(1000);
    let rounds: u64 = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(6);
    let rt = spindle::Runtime::builder()
        .workers(2)
        .stack_size(16 * 1024)
        .build()
        .unwrap();
    for round in 0..rounds {
        STARTED.store(0, Ordering::SeqCst);
        WOKEN.store(0, Ordering::SeqCst);
        let r = rt.block_on(|| {
            let start = Instant::now();
            let hs: Vec<_> = (0..N)
                .map(|_| {
                    spindle::spawn(move || {
                        STARTED.fetch_add(1, Ordering::Relaxed);
                        spindle::sleep(Duration::from_millis(nap)).unwrap();
                        WOKEN.fetch_add(1, Ordering::Relaxed);
                    })
                })
                .collect();
            let spawned = start.elapsed();
            while STARTED.load(Ordering::Relaxed) < N {
                spindle::sleep(Duration::from_micros(200)).unwrap();
            }
            let started = start.elapsed();
            let mut first_woken = None;
            while WOKEN.load(Ordering::Relaxed) < N {
                if first_woken.is_none() && WOKEN.load(Ordering::Relaxed) > 0 {
                    first_woken = Some(start.elapsed());
                }
                spindle::sleep(Duration::from_micros(200)).unwrap();
            }
            let all_woken = start.elapsed();
            for h in hs {
                h.join().unwrap();
            }
            (spawned, started, first_woken, all_woken, start.elapsed())
        });
        println!(
            "round {round}: spawned {:?} started {:?} first woken {:?} all woken {:?} joined {:?}",
            r.0, r.1, r.2, r.3, r.4
        );
    }
}
