//! `TCP_NODELAY` on every PostgreSQL connection of this process.
//!
//! sqlx 0.9.0 connects without `TCP_NODELAY` (its earlier releases set it):
//! <https://github.com/transact-rs/sqlx/issues/4335>, fixed by
//! <https://github.com/transact-rs/sqlx/pull/4336>, merged but in no release
//! yet. Without it, a statement
//! that does not fit in one segment waits for the server's delayed ACK
//! (Nagle's algorithm): about 40 ms on Linux for each statement over ~64 kB,
//! such as a submit of a large configuration. sqlx gives no access to the
//! socket, so each new pooled connection ([`set_on_connections_to`], run
//! from the pool's `after_connect`) sets the option on this process's TCP
//! sockets whose peer is the database's port. Setting it twice, or on
//! another socket to that port, is harmless. Remove this module once the
//! sqlx in `Cargo.lock` has that fix: `jobs/tests/it/postgres_tcp.rs` then
//! fails, saying so.
//!
//! `tcp_sockets_on` and `nodelay` (with the `test-support` feature) also let
//! the api's tests check its accepted connections, which set the option
//! themselves.

use std::os::fd::RawFd;

/// Sets `TCP_NODELAY` on every TCP socket of this process connected to a
/// peer on `port`; returns how many it found. Errors are ignored socket by
/// socket (a descriptor closed or reused meanwhile is skipped).
pub fn set_on_connections_to(port: u16) -> usize {
    let mut found = 0;
    for fd in tcp_sockets_to(port) {
        let on: libc::c_int = 1;
        // SAFETY: setsockopt on a descriptor of this process with a valid
        // pointer and length; a descriptor reused meanwhile at worst fails.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            found += 1;
        }
    }
    found
}

/// Whether socket `fd` has `TCP_NODELAY` set (`None`: not a TCP socket).
#[cfg(any(test, feature = "test-support"))]
pub fn nodelay(fd: RawFd) -> Option<bool> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt with a valid out pointer and its length.
    let rc = unsafe {
        libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, (&mut value as *mut libc::c_int).cast(), &mut len)
    };
    (rc == 0).then_some(value != 0)
}

/// The descriptors of this process that are TCP sockets connected to a peer
/// on `port` (IPv4 or IPv6), read from `/proc/self/fd`.
pub fn tcp_sockets_to(port: u16) -> Vec<RawFd> {
    own_descriptors().filter(|&fd| peer_port(fd) == Some(port)).collect()
}

/// The descriptors of this process that are connected TCP sockets whose
/// own (local) port is `port`: the connections a listener on `port` has
/// accepted (the listener itself has no peer and is left out).
#[cfg(any(test, feature = "test-support"))]
pub fn tcp_sockets_on(port: u16) -> Vec<RawFd> {
    own_descriptors().filter(|&fd| peer_port(fd).is_some() && local_port(fd) == Some(port)).collect()
}

/// Every open descriptor of this process, from `/proc/self/fd`.
fn own_descriptors() -> impl Iterator<Item = RawFd> {
    std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<RawFd>().ok())
}

/// `getsockname` or `getpeername`: the same signature.
type NameOf = unsafe extern "C" fn(libc::c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> libc::c_int;

/// The local port of TCP socket `fd`, when it is one.
#[cfg(any(test, feature = "test-support"))]
fn local_port(fd: RawFd) -> Option<u16> {
    port_by(fd, libc::getsockname)
}

/// The peer's port of TCP socket `fd`, when it is one and connected.
fn peer_port(fd: RawFd) -> Option<u16> {
    port_by(fd, libc::getpeername)
}

/// The port of the address `name_of` gives for stream socket `fd`.
fn port_by(fd: RawFd, name_of: NameOf) -> Option<u16> {
    if !is_stream(fd) {
        return None;
    }
    // SAFETY: an all-zero sockaddr_storage is a valid value.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: getsockname/getpeername with a valid out buffer and its length.
    let rc = unsafe { name_of(fd, (&mut addr as *mut libc::sockaddr_storage).cast(), &mut len) };
    if rc != 0 {
        return None;
    }
    port_of(&addr)
}

/// Whether `fd` is a stream socket.
fn is_stream(fd: RawFd) -> bool {
    let mut kind: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt with a valid out pointer and its length.
    let rc = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE, (&mut kind as *mut libc::c_int).cast(), &mut len)
    };
    rc == 0 && kind == libc::SOCK_STREAM
}

/// The port of an IPv4 or IPv6 socket address.
fn port_of(addr: &libc::sockaddr_storage) -> Option<u16> {
    match i32::from(addr.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let v4 = unsafe { &*(addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(u16::from_be(v4.sin_port))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let v6 = unsafe { &*(addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(u16::from_be(v6.sin6_port))
        }
        _ => None,
    }
}
