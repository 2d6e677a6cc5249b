//! Which HTTP thread answers a new connection: the one with the fewest open connections.
//! The threads share one listener, and whichever wakes first accepts every connection the
//! kernel has queued: a client opening its 16 connections at once had all 16 on one thread
//! while the other idled (measured: a quarter of two CPUs idle, and the same throughput as one
//! thread). So the thread that accepts counts the connection against the least busy thread
//! (itself on a tie) and, if that is another, hands the socket over; a connection stays on its
//! thread for its life. Open connections are the measure because a connection is what a
//! thread keeps: a browser's six, a load tool's sixteen, each about as busy as the next.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::sync::OwnedSemaphorePermit;

/// A connection accepted by one thread for another to answer.
pub struct Handed {
    pub stream: std::net::TcpStream,
    pub client: SocketAddr,
    pub permit: OwnedSemaphorePermit,
    pub seat: Seat,
}

/// The open connections of each thread, and the way to hand a thread a connection.
pub struct Spread {
    /// Open connections by thread, shared with the seats (which hold nothing else: a seat
    /// left in a channel must not keep the channel alive).
    open: Arc<[AtomicUsize]>,
    handed: Vec<mpsc::UnboundedSender<Handed>>,
}

/// One HTTP thread's place in the spread: its index and the connections handed to it.
pub struct Front {
    pub thread: usize,
    pub spread: Arc<Spread>,
    pub handed: mpsc::UnboundedReceiver<Handed>,
}

/// A connection counted against thread `thread` until this is dropped.
pub struct Seat {
    open: Arc<[AtomicUsize]>,
    thread: usize,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.open[self.thread].fetch_sub(1, Ordering::Relaxed);
    }
}

impl Seat {
    /// The thread this connection is counted against.
    pub fn thread(&self) -> usize {
        self.thread
    }
}

impl Spread {
    /// A spread over `threads` threads: each one's `Front` (index = thread).
    pub fn fronts(threads: usize) -> Vec<Front> {
        let (spread, receivers) = Self::new(threads);
        let fronts = receivers.into_iter().enumerate();
        fronts.map(|(thread, handed)| Front { thread, spread: spread.clone(), handed }).collect()
    }

    fn new(threads: usize) -> (Arc<Spread>, Vec<mpsc::UnboundedReceiver<Handed>>) {
        let (handed, receivers): (Vec<_>, Vec<_>) =
            (0..threads.max(1)).map(|_| mpsc::unbounded_channel()).unzip();
        let open = handed.iter().map(|_| AtomicUsize::new(0)).collect();
        (Arc::new(Spread { open, handed }), receivers)
    }

    /// Count a connection just accepted by thread `me` against the thread with the fewest open
    /// connections (`me` on a tie). A thread that no longer takes connections (it stopped, or
    /// its runtime failed) is passed over.
    pub fn seat(&self, me: usize) -> Seat {
        let mut best = me;
        let mut fewest = self.open[me].load(Ordering::Relaxed);
        for (i, open) in self.open.iter().enumerate() {
            let open = open.load(Ordering::Relaxed);
            if open < fewest && !self.handed[i].is_closed() {
                (best, fewest) = (i, open);
            }
        }
        // Two threads accepting at once may both pick the same thread: a connection more or
        // less on one thread, corrected by the next accept.
        self.open[best].fetch_add(1, Ordering::Relaxed);
        Seat { open: self.open.clone(), thread: best }
    }

    /// Give `handed` to the thread it is seated on; back if that thread no longer takes
    /// connections (it is stopping).
    pub fn hand(&self, handed: Handed) -> Result<(), Handed> {
        self.handed[handed.seat.thread].send(handed).map_err(|e| e.0)
    }

    #[cfg(test)]
    fn open(&self, thread: usize) -> usize {
        self.open[thread].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_accepted_by_one_thread_is_seated_evenly() {
        let (spread, _rx) = Spread::new(2);
        let seats: Vec<Seat> = (0..16).map(|_| spread.seat(0)).collect();
        assert_eq!((spread.open(0), spread.open(1)), (8, 8));
        assert_eq!(seats.iter().filter(|s| s.thread() == 1).count(), 8);
        // The accepting thread keeps the connection on a tie.
        assert_eq!(seats[0].thread(), 0);
        drop(seats);
        assert_eq!((spread.open(0), spread.open(1)), (0, 0));
    }

    #[test]
    fn a_closed_connection_frees_its_thread_for_the_next() {
        let (spread, _rx) = Spread::new(3);
        let a = spread.seat(0);
        let b = spread.seat(0);
        let c = spread.seat(0);
        assert_eq!([a.thread(), b.thread(), c.thread()], [0, 1, 2]);
        drop(b);
        assert_eq!(spread.seat(2).thread(), 1, "the thread with none open takes it");
    }

    #[test]
    fn a_thread_that_takes_no_connections_is_passed_over() {
        let (spread, mut receivers) = Spread::new(3);
        let _busy = spread.seat(0);
        drop(receivers.remove(1)); // thread 1's runtime failed, or it stopped
        let seats: Vec<Seat> = (0..4).map(|_| spread.seat(0)).collect();
        assert!(seats.iter().all(|s| s.thread() != 1), "seated on a thread that is gone");
        assert_eq!((spread.open(0), spread.open(2)), (3, 2));
    }

    #[tokio::test]
    async fn a_handed_connection_reaches_its_thread_or_comes_back() {
        let (spread, mut receivers) = Spread::new(2);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, addr) = listener.accept().unwrap();
        let permits = Arc::new(tokio::sync::Semaphore::new(1));
        let permit = permits.clone().try_acquire_owned().unwrap();
        let _first = spread.seat(0);
        let seat = spread.seat(0);
        assert_eq!(seat.thread(), 1);
        spread.hand(Handed { stream, client: addr, permit, seat }).ok().unwrap();
        let got = receivers[1].recv().await.unwrap();
        assert_eq!(got.client, client.local_addr().unwrap());

        // A stopped thread's receiver is gone: the connection comes back to the acceptor.
        drop(receivers.remove(1));
        let back = spread.hand(got).expect_err("thread 1 stopped");
        assert_eq!(back.seat.thread(), 1);
    }
}
