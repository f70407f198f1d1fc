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

/// What a service's set-up of one core failed with: any error (a
/// [`flowlane_tcp::Error`] from [`SetupExt::listen`], a `String`, a
/// backend's own, an `anyhow::Error`) converts into it, with `?` or
/// `Into::into`.
pub type SetupError = Box<dyn std::error::Error + Send + Sync>;

/// What a set-up function (the closure every backend's `start` runs on
/// each core: `Fn(&mut dyn Setup) -> R`) may return: nothing, the
/// [`HandlerId`] of what it registered, or either in a `Result` whose
/// error converts into a [`SetupError`]. So the one registration a service
/// usually makes is its whole set-up, on every backend:
///
/// ```
/// use flowlane_app::{ConnHandle, ConnHandler, IntoSetupResult, Net, Setup, SetupExt};
/// # use flowlane_app::{Dispatcher, Error, HandlerId};
/// # /// A core that takes every registration.
/// # #[derive(Default)]
/// # struct Core(Dispatcher);
/// # impl Setup for Core {
/// #     fn queue(&self) -> u32 { 0 }
/// #     fn listen_boxed(&mut self, _: u16, h: Box<dyn ConnHandler>) -> Result<HandlerId, Error> {
/// #         Ok(self.0.add_boxed(h))
/// #     }
/// #     fn add_boxed(&mut self, h: Box<dyn ConnHandler>) -> HandlerId { self.0.add_boxed(h) }
/// #     fn listen_with(&mut self, _: u16, _: HandlerId) -> Result<(), Error> { Ok(()) }
/// # }
///
/// struct Hello;
/// impl ConnHandler for Hello {
///     fn on_accept(&mut self, net: &mut dyn Net, conn: ConnHandle) {
///         let _ = net.send(conn, b"hello\n");
///         let _ = net.shutdown_write(conn);
///     }
///     fn on_data(&mut self, net: &mut dyn Net, conn: ConnHandle) {
///         net.discard(conn);
///     }
///     fn on_peer_closed(&mut self, net: &mut dyn Net, conn: ConnHandle) {
///         let _ = net.close(conn);
///     }
/// }
///
/// // One listener: the registration is the set-up's result.
/// let one = |s: &mut dyn Setup| s.listen(7000, Hello);
/// // Several: `?` on each, the error type said once.
/// let two = |s: &mut dyn Setup| -> Result<(), flowlane_app::Error> {
///     s.listen(7000, Hello)?;
///     s.listen(7001, Hello)?;
///     Ok(())
/// };
/// # let mut core = Core::default();
/// assert!(one(&mut core).into_setup_result().is_ok());
/// assert!(two(&mut core).into_setup_result().is_ok());
/// ```
///
/// A backend's `start` calls [`IntoSetupResult::into_setup_result`] on
/// what each core's set-up returned.
pub trait IntoSetupResult {
    /// The set-up's outcome, its error converted.
    fn into_setup_result(self) -> Result<(), SetupError>;
}

impl IntoSetupResult for () {
    fn into_setup_result(self) -> Result<(), SetupError> {
        Ok(())
    }
}

impl IntoSetupResult for HandlerId {
    fn into_setup_result(self) -> Result<(), SetupError> {
        Ok(())
    }
}

impl<E: Into<SetupError>> IntoSetupResult for Result<(), E> {
    fn into_setup_result(self) -> Result<(), SetupError> {
        self.map_err(Into::into)
    }
}

impl<E: Into<SetupError>> IntoSetupResult for Result<HandlerId, E> {
    fn into_setup_result(self) -> Result<(), SetupError> {
        self.map(drop).map_err(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each shape a set-up returns converts, its error kept in words.
    #[test]
    fn every_set_up_result_converts() {
        assert!(().into_setup_result().is_ok());
        assert!(Ok::<(), String>(()).into_setup_result().is_ok());
        let listen: Result<HandlerId, Error> = Err(Error::AddrInUse);
        assert_eq!(
            listen.into_setup_result().unwrap_err().to_string(),
            "address in use"
        );
        let said = Err::<(), _>("core 3: no").into_setup_result();
        assert_eq!(said.unwrap_err().to_string(), "core 3: no");
        let own = Err::<(), _>(std::io::Error::other("own")).into_setup_result();
        assert_eq!(own.unwrap_err().to_string(), "own");
    }
}
