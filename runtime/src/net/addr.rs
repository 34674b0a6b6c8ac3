//! Addresses: [`ToSocketAddrs`] and [`lookup_host`], which resolve names
//! on the blocking pool, never on a worker.
//!
//! std's `ToSocketAddrs` resolves inside `to_socket_addrs`, on the calling
//! thread, and cannot say beforehand whether it will: so spindle has a
//! trait of its own, implemented for the same std types, that splits a
//! literal address (parsed here, no syscall) from a name (looked up on the
//! pool, with the owned name in the job, so that the task's wait for it
//! can end early on its deadline, an interrupt or a stop).

use crate::error::WaitError;
use crate::io::blocking;
use crate::io::source::wait_error;
use crate::meta::wait_queue::WaitPolicy;
use crate::sched;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// What an address resolves to: addresses at once, or a name to look up.
#[derive(Debug)]
pub enum Resolve {
    /// A literal address (or several).
    Addrs(Vec<SocketAddr>),
    /// A name and port, looked up off the worker.
    Lookup(String, u16),
    /// `"host:port"`, looked up off the worker.
    LookupStr(String),
}

mod sealed {
    /// Only spindle implements [`ToSocketAddrs`](super::ToSocketAddrs).
    pub trait Sealed {}
}

/// Something that names socket addresses, as std's `ToSocketAddrs`
/// (implemented for the same types), but whose names are resolved on the
/// blocking pool so that a lookup suspends only the task.
pub trait ToSocketAddrs: sealed::Sealed {
    #[doc(hidden)]
    fn to_resolve(&self) -> Resolve;
}

macro_rules! literal {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl ToSocketAddrs for $t {
            fn to_resolve(&self) -> Resolve {
                Resolve::Addrs(std::net::ToSocketAddrs::to_socket_addrs(self)
                    .map(Iterator::collect)
                    .unwrap_or_default())
            }
        }
    )*};
}

literal!(
    SocketAddr,
    SocketAddrV4,
    SocketAddrV6,
    (IpAddr, u16),
    (Ipv4Addr, u16),
    (Ipv6Addr, u16)
);

impl sealed::Sealed for [SocketAddr] {}
impl ToSocketAddrs for [SocketAddr] {
    fn to_resolve(&self) -> Resolve {
        Resolve::Addrs(self.to_vec())
    }
}

impl sealed::Sealed for str {}
impl ToSocketAddrs for str {
    fn to_resolve(&self) -> Resolve {
        match self.parse::<SocketAddr>() {
            Ok(a) => Resolve::Addrs(vec![a]),
            Err(_) => Resolve::LookupStr(self.to_owned()),
        }
    }
}

impl sealed::Sealed for String {}
impl ToSocketAddrs for String {
    fn to_resolve(&self) -> Resolve {
        self.as_str().to_resolve()
    }
}

impl sealed::Sealed for (&str, u16) {}
impl ToSocketAddrs for (&str, u16) {
    fn to_resolve(&self) -> Resolve {
        match self.0.parse::<IpAddr>() {
            Ok(ip) => Resolve::Addrs(vec![SocketAddr::new(ip, self.1)]),
            Err(_) => Resolve::Lookup(self.0.to_owned(), self.1),
        }
    }
}

impl sealed::Sealed for (String, u16) {}
impl ToSocketAddrs for (String, u16) {
    fn to_resolve(&self) -> Resolve {
        (self.0.as_str(), self.1).to_resolve()
    }
}

impl<T: ToSocketAddrs + ?Sized> sealed::Sealed for &T {}
impl<T: ToSocketAddrs + ?Sized> ToSocketAddrs for &T {
    fn to_resolve(&self) -> Resolve {
        (**self).to_resolve()
    }
}

/// Resolves `addr`: literals here, names on the blocking pool (inside a
/// task; a plain thread looks them up itself, as std).
pub(crate) fn resolve(addr: &(impl ToSocketAddrs + ?Sized)) -> io::Result<Vec<SocketAddr>> {
    let lookup = move |r: Resolve| -> io::Result<Vec<SocketAddr>> {
        use std::net::ToSocketAddrs as _;
        match r {
            Resolve::Addrs(a) => Ok(a),
            Resolve::Lookup(host, port) => Ok((host.as_str(), port).to_socket_addrs()?.collect()),
            Resolve::LookupStr(s) => Ok(s.to_socket_addrs()?.collect()),
        }
    };
    let r = addr.to_resolve();
    if matches!(r, Resolve::Addrs(_)) || sched::suspendable_task().is_none() {
        return lookup(r);
    }
    match blocking::start(move || lookup(r)).wait(WaitPolicy::Interruptible, None) {
        Ok(Ok(result)) => result,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(e) => Err(wait_error(e)),
    }
}

/// Resolves `host` to its socket addresses, off the worker (std's
/// `(host, port).to_socket_addrs()`, whose lookup would block it).
///
/// # Errors
///
/// The lookup's error; or, if the task's wait for it ends first, the
/// wait's (see [`crate::io`]).
pub fn lookup_host(host: impl ToSocketAddrs) -> io::Result<std::vec::IntoIter<SocketAddr>> {
    resolve(&host).map(Vec::into_iter)
}

/// Calls `f` with each address of `addr` in turn until one succeeds, as
/// std's `connect` and `bind` do; the last error otherwise.
pub(crate) fn each_addr<T>(
    addr: &(impl ToSocketAddrs + ?Sized),
    mut f: impl FnMut(&SocketAddr) -> io::Result<T>,
) -> io::Result<T> {
    let addrs = resolve(addr)?;
    let mut last = None;
    for a in &addrs {
        match f(a) {
            Ok(t) => return Ok(t),
            // The task's wait ended (deadline, interrupt, stop): that ends
            // the call, not just this address.
            Err(e) if e.get_ref().is_some_and(|i| i.is::<WaitError>()) => return Err(e),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "could not resolve to any addresses",
        )
    }))
}
