//! The one batch runner: worker threads that take jobs from the calling thread and hand
//! them back done.
//!
//! Both batch paths run on it: [`crate::request::pack_bodies_with`] (a job is a request
//! body) and the extension's `pack_many` (a job is a chunk of transcripts the calling
//! thread copied out of Python objects while the workers packed the previous ones).
//!
//! Jobs wait in a queue of the depth each caller sets (enough that a worker finds the
//! next job waiting when it is done, without sleeping until the calling thread offers
//! one: 64 request bodies a worker, or one chunk of transcripts); past that,
//! [`Workers::offer`] gives the job back and the calling thread runs it itself, so it
//! never blocks on a full queue and stays as busy as the workers. Workers
//! take one job at a time, so one long job does not hold up a fixed share of the rest.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender, TryIter};
use std::sync::{Arc, Mutex};
use std::thread::{Scope, ScopedJoinHandle};

/// Threads a batch uses at most, whatever it is asked for.
pub const MAX_THREADS: usize = 64;

/// Up to `threads - 1` threads in a [`std::thread::scope`] (the calling thread is the
/// last one) running `work` on each job offered, then sending it back.
pub struct Workers<'scope, J, W> {
    work: &'scope W,
    /// Closed by [`Workers::finish`]: no job comes after.
    queue: Option<SyncSender<J>>,
    waiting: Arc<Mutex<Receiver<J>>>,
    back: Receiver<J>,
    stopped: Arc<AtomicBool>,
    threads: Vec<ScopedJoinHandle<'scope, ()>>,
}

impl<'scope, J, W> Workers<'scope, J, W>
where
    J: Send + 'scope,
    W: Fn(&mut J) + Sync,
{
    /// Starts up to `threads - 1` workers (at most [`MAX_THREADS`] in all), fewer when the
    /// system refuses one: the calling thread then runs their share. Up to `depth` jobs a
    /// worker wait in the queue.
    pub fn start<'env>(scope: &'scope Scope<'scope, 'env>, threads: usize, depth: usize, work: &'scope W) -> Self {
        let wanted = threads.clamp(1, MAX_THREADS) - 1;
        let (queue, waiting) = sync_channel(wanted.saturating_mul(depth));
        let waiting = Arc::new(Mutex::new(waiting));
        let (done, back) = channel();
        let stopped = Arc::new(AtomicBool::new(false));
        let threads = (0..wanted)
            .map_while(|_| {
                let (waiting, done, stopped) = (Arc::clone(&waiting), done.clone(), Arc::clone(&stopped));
                std::thread::Builder::new().spawn_scoped(scope, move || run(work, &waiting, &done, &stopped)).ok()
            })
            .collect();
        // Only the workers hold a sender: `back` ends when they all have.
        Workers { work, queue: Some(queue), waiting, back, stopped, threads }
    }

    /// How many workers run beside the calling thread.
    pub fn started(&self) -> usize {
        self.threads.len()
    }

    /// Queues `job` for a worker, or gives it back when none can take it soon (the queue
    /// full, no worker at all, or the queue closed): the caller runs it.
    ///
    /// # Errors
    /// The job, when the caller is to run it.
    pub fn offer(&self, job: J) -> Result<(), J> {
        match &self.queue {
            Some(queue) if !self.threads.is_empty() => queue.try_send(job).map_err(|refused| match refused {
                std::sync::mpsc::TrySendError::Full(job) | std::sync::mpsc::TrySendError::Disconnected(job) => job,
            }),
            _ => Err(job),
        }
    }

    /// The jobs done and not yet taken back, as many as are back now.
    pub fn done(&self) -> TryIter<'_, J> {
        self.back.try_iter()
    }

    /// No job is started after this: the waiting ones are dropped unrun.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    /// Closes the queue, runs the jobs still waiting on the calling thread beside the
    /// workers, hands every job to `back` as it is done (between the ones run here, so
    /// the caller takes results in while a worker holds a long job) and waits for the
    /// workers to end. When `back` returns false, no job is started after it. A worker
    /// that panicked loses the job it held, and the panic stays in its thread.
    pub fn finish(mut self, mut back: impl FnMut(J) -> bool) {
        self.queue = None;
        let mut hand = |job: J, workers: &Self| {
            if !back(job) {
                workers.stop();
            }
        };
        loop {
            let next = self.waiting.lock().ok().and_then(|waiting| waiting.try_recv().ok());
            let Some(mut job) = next else { break };
            if !self.stopped.load(Ordering::Acquire) {
                (self.work)(&mut job);
                hand(job, &self);
            }
            self.back.try_iter().for_each(|job| hand(job, &self));
        }
        self.back.iter().for_each(|job| hand(job, &self));
        for thread in std::mem::take(&mut self.threads) {
            drop(thread.join());
        }
    }
}

impl<J, W> Drop for Workers<'_, J, W> {
    /// Left without [`Workers::finish`] (an early return), the workers start no job
    /// still waiting.
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::Release);
    }
}

/// Runs `work` on each job waiting until the queue is closed and empty, sending each back.
fn run<J, W: Fn(&mut J)>(work: &W, waiting: &Mutex<Receiver<J>>, done: &Sender<J>, stopped: &AtomicBool) {
    loop {
        let next = match waiting.lock() {
            Ok(waiting) => waiting.recv(),
            Err(_) => return, // poisoned: another worker panicked while taking a job
        };
        let Ok(mut job) = next else { return };
        if stopped.load(Ordering::Acquire) {
            continue;
        }
        work(&mut job);
        if done.send(job).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Offers jobs `0..n` (squaring each), running refused ones here, and collects them.
    fn square_all(threads: usize, n: u64) -> (usize, Vec<(u64, u64)>) {
        let work = |job: &mut (u64, u64)| job.1 = job.0 * job.0;
        let mut out = Vec::new();
        let started = std::thread::scope(|scope| {
            let workers = Workers::start(scope, threads, 1, &work);
            for k in 0..n {
                if let Err(mut job) = workers.offer((k, 0)) {
                    work(&mut job);
                    out.push(job);
                }
                out.extend(workers.done());
            }
            let started = workers.started();
            workers.finish(|job| {
                out.push(job);
                true
            });
            started
        });
        out.sort_unstable();
        (started, out)
    }

    #[test]
    fn every_job_comes_back_done_once() {
        for threads in [0, 1, 2, 3, 8, 1000] {
            let (started, out) = square_all(threads, 500);
            assert_eq!(started, threads.clamp(1, MAX_THREADS) - 1);
            assert_eq!(out, (0..500).map(|k| (k, k * k)).collect::<Vec<_>>(), "{threads}");
        }
    }

    /// A work that tells `started` when it begins a job and then waits for `gate` to
    /// send (or close).
    fn held(started: Sender<u32>, gate: Receiver<()>) -> impl Fn(&mut u32) + Sync {
        let (started, gate) = (Mutex::new(started), Mutex::new(gate));
        move |job: &mut u32| {
            drop(started.lock().map(|s| s.send(*job)));
            drop(gate.lock().map(|g| g.recv()));
        }
    }

    #[test]
    fn the_caller_runs_what_no_worker_can_take() {
        let (started_tx, started) = channel();
        let (go, gate) = channel();
        let work = held(started_tx, gate);
        let (offered, mut back) = std::thread::scope(|scope| {
            let workers = Workers::start(scope, 2, 1, &work);
            assert_eq!(workers.started(), 1);
            let mut offered = vec![workers.offer(0).is_ok()];
            assert_eq!(started.recv(), Ok(0)); // the worker holds job 0: one more may wait
            offered.extend((1..10).map(|job| workers.offer(job).is_ok()));
            drop(go);
            let mut back = Vec::new();
            workers.finish(|job| {
                back.push(job);
                true
            });
            (offered, back)
        });
        assert_eq!(offered, [true, true, false, false, false, false, false, false, false, false]);
        // Job 1 ran on whichever thread took it first (the worker, or the caller in `finish`).
        back.sort_unstable();
        assert_eq!(back, [0, 1]);
    }

    #[test]
    fn after_a_stop_no_job_starts() {
        let (started_tx, started) = channel();
        let (go, gate) = channel();
        let work = held(started_tx, gate);
        // Stopped, then finished; or dropped without `finish` (an early return).
        for dropped in [false, true] {
            let back = std::thread::scope(|scope| {
                let workers = Workers::start(scope, 2, 1, &work);
                assert!(workers.offer(0).is_ok());
                assert_eq!(started.recv(), Ok(0));
                assert!(workers.offer(1).is_ok());
                let mut back = Vec::new();
                if dropped {
                    drop(workers);
                    assert!(go.send(()).is_ok()); // job 0 ends
                } else {
                    workers.stop();
                    assert!(go.send(()).is_ok());
                    workers.finish(|job| {
                        back.push(job);
                        true
                    });
                }
                back
            });
            // The scope has joined the worker: had job 1 started, it would have said so.
            assert!(started.try_recv().is_err(), "job 1 never started ({dropped})");
            assert_eq!(back, if dropped { vec![] } else { vec![0] }, "job 1 waited and was dropped unrun");
        }
    }

    #[test]
    fn a_worker_that_panics_loses_its_job_not_the_batch() {
        let (started_tx, started) = channel();
        let started_tx = Mutex::new(started_tx);
        let work = |job: &mut u32| {
            drop(started_tx.lock().map(|s| s.send(*job)));
            assert_ne!(*job, 7, "a worker's panic");
        };
        let (refused, back) = std::thread::scope(|scope| {
            let workers = Workers::start(scope, 2, 1, &work);
            assert!(workers.offer(7).is_ok());
            assert_eq!(started.recv(), Ok(7), "the only worker took job 7, on which it panics");
            // The dead worker takes nothing more: one job waits, the others come back.
            let refused: Vec<u32> = (0..5).filter_map(|job| workers.offer(job).err()).collect();
            let mut back = Vec::new();
            workers.finish(|job| {
                back.push(job);
                true
            });
            (refused, back)
        });
        assert_eq!(refused, [1, 2, 3, 4]);
        assert_eq!(back, [0], "the job left waiting ran on the calling thread, job 7 is lost");
    }
}
