//! Moving a handler's per-connection entry with its connection
//! ([`ConnHandler::on_export`](crate::ConnHandler::on_export) and
//! [`ConnHandler::on_import`](crate::ConnHandler::on_import)) for the
//! common case of a map from handle to state ([`ConnMap`]).

use flowlane_tcp::ConnHandle;

use crate::conn_map::ConnMap;
use crate::handler::ConnState;

/// Takes `conn`'s entry out of `map` for `on_export`.
pub fn export_entry<T: Send + 'static>(
    map: &mut ConnMap<T>,
    conn: ConnHandle,
) -> Option<ConnState> {
    map.remove(conn).map(|t| Box::new(t) as ConnState)
}

/// Puts what [`export_entry`] took on the other core into `map` under the
/// connection's new handle (`on_import`); false if there was nothing of
/// type `T` to put.
pub fn import_entry<T: Send + 'static>(
    map: &mut ConnMap<T>,
    conn: ConnHandle,
    state: Option<ConnState>,
) -> bool {
    match state.map(|s| s.downcast::<T>()) {
        Some(Ok(t)) => {
            map.insert(conn, *t);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_moves_between_maps_under_its_new_handle() {
        let mut stack = flowlane_tcp::Stack::new(flowlane_tcp::Config::new([1; 16]));
        let now = flowlane_tcp::time::Instant::ZERO;
        let server = "10.0.0.2:80".parse().unwrap();
        let old = stack
            .connect(now, "10.0.0.1:1000".parse().unwrap(), server)
            .unwrap();
        let new = stack
            .connect(now, "10.0.0.1:1001".parse().unwrap(), server)
            .unwrap();
        let mut a: ConnMap<String> = ConnMap::new();
        a.insert(old, "state".into());
        let moved = export_entry(&mut a, old);
        assert!(a.is_empty());
        let mut b: ConnMap<String> = ConnMap::new();
        assert!(import_entry(&mut b, new, moved));
        assert_eq!(b.get(new).map(String::as_str), Some("state"));
        // Another type, or nothing, is not put.
        let mut c: ConnMap<u64> = ConnMap::new();
        assert!(!import_entry(&mut c, new, Some(Box::new("x"))));
        assert!(!import_entry(&mut c, new, None));
        assert!(c.is_empty());
    }
}
