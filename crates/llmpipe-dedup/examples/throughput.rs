//! Single-thread throughput of shingling and signatures on a text file (one document per line).
//! `cargo run --release -p llmpipe-dedup --example throughput -- FILE [shingle|minhash|sorted] [REPEAT]`
//! (compare the user CPU time of the two modes on a busy machine).

use std::time::Instant;

use llmpipe_dedup::{MinHasher, ShingleConfig, Shingler};

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: throughput FILE [shingle|minhash|sorted] [REPEAT]");
    let mode = args.next().unwrap_or_else(|| "minhash".into());
    let repeat: usize = args.next().map_or(5, |r| r.parse().expect("REPEAT"));
    let text = std::fs::read_to_string(path).expect("read");
    let docs: Vec<&str> = text.lines().collect();
    let cfg = ShingleConfig::default();
    let h = MinHasher::new(112, 1);
    let mut sh = Shingler::default();
    let mut set = Vec::new();
    let mut sig = vec![0u32; 112];
    let t = Instant::now();
    let mut n = 0usize;
    for _ in 0..repeat {
        for d in &docs {
            if mode == "sorted" {
                sh.shingles(d, &cfg, &mut set);
            } else {
                sh.hashes(d, &cfg, &mut set);
            }
            n += set.len();
            if mode != "shingle" {
                h.signature_into(&set, &mut sig);
            }
        }
    }
    let dt = t.elapsed().as_secs_f64();
    let mb = text.len() as f64 * repeat as f64 / 1e6;
    println!(
        "{mode}: {:.1} MB, {n} shingles, {:.0} MB/s wall, {:.1} ns/shingle wall",
        mb,
        mb / dt,
        dt * 1e9 / n as f64
    );
}
