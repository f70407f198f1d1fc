//! Support for tests that fake a [`Net`](crate::Net): the settings and
//! queries a fake has no use for, written once.
//!
//! Only with the `testing` feature (and in this crate's own tests), so that
//! it is no part of the API an application sees.

/// Implements, inside an `impl Net for Fake` block, the methods of
/// [`Net`](crate::Net) a fake stack has no use for: the per-connection
/// settings (`set_nodelay`, `set_keepalive`, `set_send_buffer`,
/// `set_recv_buffer`, `set_congestion`, `set_user_data`) take anything and
/// do nothing, `user_data` is 0, `state` is `Established` and `info` is
/// `Err(WouldBlock)` (no TCP figures). The fake writes the rest: what its
/// test looks at. `fake_net_settings!(except info)` leaves `info` to a
/// fake whose test reads its figures.
///
/// ```
/// use flowlane_app::{ConnHandle, Error, FourTuple, Net, Placement, Stats};
/// use std::net::SocketAddr;
/// use std::time::Duration;
///
/// /// A connection that takes every byte and has none to read.
/// #[derive(Default)]
/// struct Sink {
///     sent: usize,
///     stats: Stats,
/// }
///
/// impl Net for Sink {
///     flowlane_app::fake_net_settings!();
///     fn now(&self) -> Duration {
///         Duration::ZERO
///     }
///     fn placement(&self) -> Placement {
///         Placement { queue: 0, cpu: None, node: 0 }
///     }
///     fn connect(&mut self, _remote: SocketAddr) -> Result<ConnHandle, Error> {
///         Err(Error::InvalidState)
///     }
///     fn send(&mut self, _conn: ConnHandle, data: &[u8]) -> Result<usize, Error> {
///         self.sent += data.len();
///         Ok(data.len())
///     }
///     fn recv(&mut self, _conn: ConnHandle, _buf: &mut [u8]) -> Result<usize, Error> {
///         Err(Error::WouldBlock)
///     }
///     fn peek(&self, _conn: ConnHandle) -> Result<&[u8], Error> {
///         Ok(&[])
///     }
///     fn consume(&mut self, _conn: ConnHandle, _n: usize) -> Result<usize, Error> {
///         Ok(0)
///     }
///     fn is_eof(&self, _conn: ConnHandle) -> bool {
///         false
///     }
///     fn send_space(&self, _conn: ConnHandle) -> Result<usize, Error> {
///         Ok(usize::MAX)
///     }
///     fn want_writable(&mut self, _conn: ConnHandle) -> bool {
///         false
///     }
///     fn shutdown_write(&mut self, _conn: ConnHandle) -> Result<(), Error> {
///         Ok(())
///     }
///     fn close(&mut self, _conn: ConnHandle) -> Result<(), Error> {
///         Ok(())
///     }
///     fn abort(&mut self, _conn: ConnHandle) -> Result<(), Error> {
///         Ok(())
///     }
///     fn four_tuple(&self, _conn: ConnHandle) -> Result<FourTuple, Error> {
///         Err(Error::InvalidState)
///     }
///     fn stats(&self) -> &Stats {
///         &self.stats
///     }
/// }
///
/// let mut sink = Sink::default();
/// let conn = ConnHandle::from_parts(0, 0);
/// assert_eq!(sink.send(conn, b"hello"), Ok(5));
/// assert_eq!(sink.set_nodelay(conn, true), Ok(()));
/// assert_eq!(sink.user_data(conn), Ok(0));
/// ```
#[macro_export]
macro_rules! fake_net_settings {
    () => {
        $crate::fake_net_settings!(except info);
        fn info(
            &self,
            _conn: $crate::ConnHandle,
        ) -> ::core::result::Result<$crate::ConnInfo, $crate::Error> {
            Err($crate::Error::WouldBlock)
        }
    };
    (except info) => {
        fn set_nodelay(
            &mut self,
            _conn: $crate::ConnHandle,
            _nodelay: bool,
        ) -> ::core::result::Result<(), $crate::Error> {
            Ok(())
        }
        fn set_keepalive(
            &mut self,
            _conn: $crate::ConnHandle,
            _on: bool,
        ) -> ::core::result::Result<(), $crate::Error> {
            Ok(())
        }
        fn set_send_buffer(
            &mut self,
            _conn: $crate::ConnHandle,
            _bytes: usize,
        ) -> ::core::result::Result<(), $crate::Error> {
            Ok(())
        }
        fn set_recv_buffer(
            &mut self,
            _conn: $crate::ConnHandle,
            _bytes: usize,
        ) -> ::core::result::Result<(), $crate::Error> {
            Ok(())
        }
        fn set_congestion(
            &mut self,
            _conn: $crate::ConnHandle,
            _alg: $crate::CongestionAlgorithm,
        ) -> ::core::result::Result<(), $crate::Error> {
            Ok(())
        }
        fn state(
            &self,
            _conn: $crate::ConnHandle,
        ) -> ::core::result::Result<$crate::State, $crate::Error> {
            Ok($crate::State::Established)
        }
        fn set_user_data(
            &mut self,
            _conn: $crate::ConnHandle,
            _data: u64,
        ) -> ::core::result::Result<(), $crate::Error> {
            Ok(())
        }
        fn user_data(
            &self,
            _conn: $crate::ConnHandle,
        ) -> ::core::result::Result<u64, $crate::Error> {
            Ok(0)
        }
    };
}
