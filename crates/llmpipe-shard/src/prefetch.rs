//! A background thread that produces items ahead of the consumer, in order, into a bounded queue.
//!
//! The producer is called with the item's position `0, 1, 2, ...` until it returns `None` or an
//! error; at most `depth` finished items wait in the queue. Dropping the [`Prefetch`] stops the
//! producer and joins its thread (the producer never waits on the consumer while it holds no slot).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

pub struct Prefetch<T: Send + 'static, E: Send + 'static> {
    rx: Mutex<Option<Receiver<Result<T, E>>>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl<T: Send + 'static, E: Send + 'static> Prefetch<T, E> {
    pub fn spawn<F>(depth: usize, mut produce: F) -> std::io::Result<Self>
    where
        F: FnMut(usize) -> Option<Result<T, E>> + Send + 'static,
    {
        let (tx, rx) = sync_channel(depth.max(1));
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new().name("llmpipe-prefetch".into()).spawn(move || {
            let mut pos = 0usize;
            while !flag.load(Ordering::Relaxed) {
                let Some(item) = produce(pos) else { break };
                let failed = item.is_err();
                if tx.send(item).is_err() || failed {
                    break; // the consumer is gone, or it has the error
                }
                pos += 1;
            }
        })?;
        Ok(Self { rx: Mutex::new(Some(rx)), stop, handle: Some(handle) })
    }

    /// The next item in order; `None` once the producer has finished and the queue is empty.
    /// Blocks while the producer works on it.
    pub fn next(&self) -> Option<Result<T, E>> {
        let guard = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().and_then(|rx| rx.recv().ok())
    }
}

impl<T: Send + 'static, E: Send + 'static> Drop for Prefetch<T, E> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // dropping the receiver wakes a producer blocked on a full queue (its send fails)
        drop(self.rx.lock().unwrap_or_else(|e| e.into_inner()).take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_and_finishes() {
        let p: Prefetch<usize, String> =
            Prefetch::spawn(2, |i| if i < 100 { Some(Ok(i * i)) } else { None }).unwrap();
        let got: Vec<usize> = std::iter::from_fn(|| p.next()).map(|r| r.unwrap()).collect();
        assert_eq!(got, (0..100).map(|i| i * i).collect::<Vec<_>>());
        assert!(p.next().is_none());
    }

    #[test]
    fn error_ends_the_stream() {
        let p: Prefetch<usize, String> =
            Prefetch::spawn(4, |i| Some(if i == 3 { Err("bad".to_string()) } else { Ok(i) })).unwrap();
        let got: Vec<Result<usize, String>> = std::iter::from_fn(|| p.next()).collect();
        assert_eq!(got, vec![Ok(0), Ok(1), Ok(2), Err("bad".to_string())]);
    }

    #[test]
    fn drop_stops_an_endless_producer() {
        let p: Prefetch<usize, ()> = Prefetch::spawn(1, |i| Some(Ok(i))).unwrap();
        assert_eq!(p.next(), Some(Ok(0)));
        drop(p); // must return: the producer is blocked on a full queue
    }
}
