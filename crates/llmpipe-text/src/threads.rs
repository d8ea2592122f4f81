//! The process's Rust thread pool.

/// Make the process-wide pool with `threads` threads. `false` where it exists already: made by an
/// earlier call or by a first parallel call, or inherited by a forked child from a parent that had
/// made it. Such an inherited pool has no threads in the child (fork copies only the calling
/// thread), so a forked child that gets `false` must not run parallel work.
pub fn claim_global_pool(threads: usize) -> bool {
    rayon::ThreadPoolBuilder::new().num_threads(threads.max(1)).build_global().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_is_claimed_once() {
        // the first claim in this test process makes the pool (no test here runs parallel work first)
        let first = claim_global_pool(2);
        assert!(!claim_global_pool(3), "a second claim must see the pool made");
        if first {
            assert_eq!(rayon::current_num_threads(), 2);
        }
    }
}
