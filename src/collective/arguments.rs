//! The plain arguments of the collective layer as a binding receives them,
//! checked once here: a call mode by name, a timeout in seconds, a store's
//! address; and a registration handed out to a binding, closed at most once.
//!
//! ```
//! use gpuport::collective::arguments::{call_mode, seconds};
//! use gpuport::collective::CallMode;
//! assert_eq!(call_mode(Some("bounded"))?, CallMode::Bounded);
//! assert_eq!(seconds(2.5, "timeout")?.as_millis(), 2500);
//! assert!(seconds(0.0, "timeout").is_err());
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Mutex;
use std::time::Duration;

use super::engine::CallMode;
use super::registration::RangeRegistration;
use crate::error::{Error, Result};

/// The call mode `mode` names; `None` is `GPUPORT_COLLECTIVE_BOUNDED`'s
/// ([`CallMode::from_env`]). Another name is [`Error::InvalidArgument`].
pub fn call_mode(mode: Option<&str>) -> Result<CallMode> {
    let Some(name) = mode else { return Ok(CallMode::from_env()) };
    CallMode::from_name(name).ok_or_else(|| Error::InvalidArgument {
        name: "mode",
        reason: format!(
            "mode={name:?}: use \"blocking\" or \"bounded\" (or None for GPUPORT_COLLECTIVE_BOUNDED's choice)"
        ),
    })
}

/// `timeout` seconds as a duration; zero, negative, not a number or too
/// large is [`Error::InvalidArgument`] (`what` names the argument).
pub fn seconds(timeout: f64, what: &'static str) -> Result<Duration> {
    Duration::try_from_secs_f64(timeout).ok().filter(|d| !d.is_zero()).ok_or_else(|| Error::InvalidArgument {
        name: what,
        reason: format!("{what}={timeout}: give a positive number of seconds"),
    })
}

/// The first address `host:port` resolves to; none is [`Error::InvalidArgument`].
pub fn socket_addr(host: &str, port: u16) -> Result<SocketAddr> {
    (host, port).to_socket_addrs().ok().and_then(|mut a| a.next()).ok_or_else(|| Error::InvalidArgument {
        name: "host",
        reason: format!("{host}:{port} does not resolve to an address"),
    })
}

/// A registration as a binding hands it out (`Communicator.register`):
/// the engine's [`RangeRegistration`] and `O`, the owner of its memory,
/// until closed. Closed at most once: the first [`close`](Self::close)
/// deregisters, and the owner is dropped only after that.
#[derive(Debug)]
pub struct OpenRegistration<O> {
    open: Mutex<Option<(RangeRegistration, O)>>,
    held: bool,
    bytes: usize,
}

impl<O> OpenRegistration<O> {
    /// `registration`, whose memory `owner` keeps alive.
    pub fn new(registration: RangeRegistration, owner: O) -> Self {
        let (held, bytes) = (registration.is_held(), registration.bytes());
        OpenRegistration { open: Mutex::new(Some((registration, owner))), held, bytes }
    }

    /// Whether the engine holds a registration ([`RangeRegistration::is_held`]).
    pub fn is_held(&self) -> bool {
        self.held
    }

    /// The registered bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether [`close`](Self::close) ran.
    pub fn is_closed(&self) -> bool {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).is_none()
    }

    /// Gives the registration to `deregister` (a communicator's
    /// [`deregister`](super::AnyCommunicator::deregister), however the
    /// binding reaches it), the first time, then drops the owner; later
    /// calls do nothing. The registration is taken out before `deregister`
    /// runs, so no lock of this object is held meanwhile.
    pub fn close<E>(
        &self,
        deregister: impl FnOnce(RangeRegistration) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let taken = self.open.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some((registration, owner)) = taken else { return Ok(()) };
        let done = deregister(registration);
        drop(owner);
        done
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::collective::AnyCommunicator;
    use crate::dynamic::raw::{Place, RawRange};

    #[test]
    fn call_modes_timeouts_and_addresses_are_checked() {
        assert_eq!(call_mode(Some("blocking")).unwrap(), CallMode::Blocking);
        let e = call_mode(Some("eager")).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { name: "mode", .. }), "{e}");
        assert!(e.to_string().contains("mode=\"eager\": use \"blocking\" or \"bounded\""), "{e}");
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = seconds(bad, "timeout").unwrap_err();
            assert!(e.to_string().contains("give a positive number of seconds"), "{bad}: {e}");
        }
        assert_eq!(seconds(0.25, "timeout").unwrap(), Duration::from_millis(250));
        assert_eq!(socket_addr("127.0.0.1", 29500).unwrap().port(), 29500);
        let e = socket_addr("no such host.invalid", 1).unwrap_err();
        assert!(e.to_string().contains("does not resolve to an address"), "{e}");
    }

    #[test]
    fn a_registration_closes_once_and_drops_its_owner_after_deregistering() {
        let comm = AnyCommunicator::init_all(&[crate::open("host").unwrap()], CallMode::Blocking).unwrap().remove(0);
        let mut memory = vec![0u8; 64];
        // SAFETY: `memory` outlives the registration, closed below.
        let range = unsafe { RawRange::new(memory.as_mut_ptr() as u64, Place::Host, Some(64), None, true) };
        // SAFETY: as above.
        let registration = unsafe { comm.register_range(&range) }.unwrap();
        let owner = Arc::new(());
        let open = OpenRegistration::new(registration, owner.clone());
        assert!(!open.is_held() && open.bytes() == 64 && !open.is_closed());
        let mut calls = 0;
        open.close(|r| {
            calls += 1;
            assert_eq!(Arc::strong_count(&owner), 2, "the owner lives through the deregistration");
            comm.deregister(r)
        })
        .unwrap();
        assert!(open.is_closed() && Arc::strong_count(&owner) == 1);
        open.close(|r| {
            calls += 1;
            comm.deregister(r)
        })
        .unwrap();
        assert_eq!(calls, 1, "a second close deregisters nothing");
    }
}
