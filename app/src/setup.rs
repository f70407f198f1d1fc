//! Registering a service's handlers on one core, whatever the backend.

use flowlane_tcp::Error;

use crate::dispatch::HandlerId;
use crate::handler::ConnHandler;

/// One core of a backend before its loop starts: a service registers its
/// handlers here (a listener's, or one that opens connections from
/// [`ConnHandler::on_start`]). The AF_XDP data path's per-queue handler and
/// the kernel-socket backend's per-thread loop implement it, so that a
/// service is written once for both.
pub trait Setup {
    /// The core's index (the receive queue on AF_XDP, the thread on kernel
    /// sockets).
    fn queue(&self) -> u32;

    /// Listens on `port`; connections accepted there go to `handler`.
    fn listen_boxed(
        &mut self,
        port: u16,
        handler: Box<dyn ConnHandler>,
    ) -> Result<HandlerId, Error>;

    /// Registers a handler that owns no listener (active opens).
    fn add_boxed(&mut self, handler: Box<dyn ConnHandler>) -> HandlerId;

    /// Listens on `port` for a handler already registered: one handler
    /// serving several ports.
    fn listen_with(&mut self, port: u16, handler: HandlerId) -> Result<(), Error>;
}

/// [`Setup`]'s registrations for handlers by value, on any `Setup` (a
/// trait object included).
pub trait SetupExt: Setup {
    /// [`Setup::listen_boxed`] for a handler by value.
    fn listen(
        &mut self,
        port: u16,
        handler: impl ConnHandler + 'static,
    ) -> Result<HandlerId, Error> {
        self.listen_boxed(port, Box::new(handler))
    }

    /// [`Setup::add_boxed`] for a handler by value.
    fn add(&mut self, handler: impl ConnHandler + 'static) -> HandlerId {
        self.add_boxed(Box::new(handler))
    }
}

impl<S: Setup + ?Sized> SetupExt for S {}
