//! An application thread: its handlers (registered by the service's
//! set-up, as on a network core) and the loop that feeds them the cores'
//! events.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use flowlane_app::{ConnHandler, Dispatcher, Error, HandlerId, ListenerId, Setup};
use flowlane_tcp::Event;

use crate::app_net::QpNet;
use crate::message::ToApp;

/// The longest the thread waits for an event: handlers' `on_tick` runs at
/// least this often.
const TICK: Duration = Duration::from_millis(10);
/// Messages taken per pass beyond the first.
const MESSAGES_PER_PASS: usize = 4096;

/// One application thread's handlers and its view of the cores.
pub(crate) struct AppThread {
    pub(crate) net: QpNet,
    pub(crate) app: Dispatcher,
    /// The ports the handlers listen on, in registration order (the same
    /// on every thread: the service's set-up runs on each).
    pub(crate) ports: Vec<u16>,
    pub(crate) index: u32,
}

impl Setup for AppThread {
    fn queue(&self) -> u32 {
        self.index
    }

    fn listen_boxed(
        &mut self,
        port: u16,
        handler: Box<dyn ConnHandler>,
    ) -> Result<HandlerId, Error> {
        let h = self.app.add_boxed(handler);
        self.listen_with(port, h)?;
        Ok(h)
    }

    fn add_boxed(&mut self, handler: Box<dyn ConnHandler>) -> HandlerId {
        self.app.add_boxed(handler)
    }

    /// The cores listen on every port the threads registered; accepted
    /// connections name the port by its index here.
    fn listen_with(&mut self, port: u16, handler: HandlerId) -> Result<(), Error> {
        if self.ports.contains(&port) {
            return Err(Error::AddrInUse);
        }
        self.ports.push(port);
        self.app.bind_listener(
            ListenerId::from_index((self.ports.len() - 1) as u32),
            handler,
        );
        Ok(())
    }
}

impl AppThread {
    /// Runs until `stop` is set or every core is gone. `open` gets the
    /// thread's open connections after each pass; `beat` the time (ns
    /// since `epoch`) each pass ends, which the cores watch for stalls.
    pub(crate) fn run(
        &mut self,
        events: &Receiver<(u32, ToApp)>,
        stop: &AtomicBool,
        open: &AtomicU64,
        (beat, epoch): (&AtomicU64, Instant),
    ) {
        let tick = || beat.store(epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
        tick();
        self.app.start(&mut self.net);
        self.pass();
        tick();
        while !stop.load(Ordering::Relaxed) {
            match events.recv_timeout(TICK) {
                Ok((core, m)) => self.net.take(core, m),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            for _ in 0..MESSAGES_PER_PASS {
                match events.try_recv() {
                    Ok((core, m)) => self.net.take(core, m),
                    Err(_) => break,
                }
            }
            self.pass();
            tick();
            open.store(self.net.open() as u64, Ordering::Relaxed);
        }
    }

    /// Delivers what came, ticks the handlers, sends what they asked.
    fn pass(&mut self) {
        self.dispatch();
        self.app.tick(&mut self.net);
        self.dispatch();
        self.net.flush();
    }

    fn dispatch(&mut self) {
        while let Some(e) = self.net.events.pop_front() {
            self.app.dispatch(e, &mut self.net);
            if let Event::Closed { conn, .. } = e {
                self.net.release(conn);
            }
        }
    }
}
