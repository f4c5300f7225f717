//! The one system call slipstream makes that no safe crate wraps: `getsockopt(TCP_INFO)`, which
//! the prefetch listener's back-off reads to see a connection's round-trip time rise above its
//! minimum (paper 000 §4, TCP Nice's signal, at the application level).
//!
//! Everything unsafe in the workspace is in this file, behind [`tcp_info`]. It is Linux-only;
//! elsewhere [`tcp_info`] returns [`std::io::ErrorKind::Unsupported`] and the caller goes on
//! without the back-off.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

/// What the kernel says of one TCP connection: the fields of `struct tcp_info` the back-off
/// uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpInfo {
    /// The smoothed round-trip time (`tcpi_rtt`).
    pub rtt: Duration,
    /// Its mean deviation (`tcpi_rttvar`).
    pub rtt_var: Duration,
    /// The least round-trip time seen over the kernel's window (`tcpi_min_rtt`, Linux 4.10 and
    /// later; `None` on an older kernel).
    pub min_rtt: Option<Duration>,
    /// The sender's maximum segment size (`tcpi_snd_mss`).
    pub snd_mss: u32,
    /// The congestion window, in segments (`tcpi_snd_cwnd`).
    pub snd_cwnd: u32,
    /// Segments sent and not yet acknowledged (`tcpi_unacked`).
    pub unacked: u32,
    /// Bytes written but not yet sent (`tcpi_notsent_bytes`, Linux 4.6 and later; `None` on an
    /// older kernel).
    pub notsent_bytes: Option<u32>,
}

impl TcpInfo {
    /// Bytes the connection holds that the peer has not acknowledged: those in flight (whole
    /// segments, an upper bound) and those not yet sent.
    pub fn outstanding_bytes(&self) -> u64 {
        u64::from(self.unacked) * u64::from(self.snd_mss)
            + u64::from(self.notsent_bytes.unwrap_or(0))
    }
}

/// Reads `TCP_INFO` of the TCP socket `socket`.
#[cfg(target_os = "linux")]
pub fn tcp_info(socket: &impl AsFd) -> io::Result<TcpInfo> {
    use std::mem::{offset_of, size_of, MaybeUninit};
    use std::os::fd::AsRawFd;

    let fd = socket.as_fd().as_raw_fd();
    let mut info = MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `fd` is a descriptor borrowed for the call; `info` is a zeroed buffer of `len`
    // bytes that outlives it, and the kernel writes at most `len` bytes into it and the length
    // it wrote into `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: every field of `tcp_info` is a plain integer, so the zeroed buffer was already a
    // valid value, and the kernel wrote only integers over part of it.
    let info = unsafe { info.assume_init() };
    let len = len as usize;
    // An older kernel writes a shorter struct: a field past what it wrote is unknown, not zero.
    let has = |end: usize| len >= end;
    let micros = |us: u32| Duration::from_micros(u64::from(us));
    Ok(TcpInfo {
        rtt: micros(info.tcpi_rtt),
        rtt_var: micros(info.tcpi_rttvar),
        min_rtt: has(offset_of!(libc::tcp_info, tcpi_min_rtt) + 4)
            .then(|| micros(info.tcpi_min_rtt))
            .filter(|d| !d.is_zero() && info.tcpi_min_rtt != u32::MAX),
        snd_mss: info.tcpi_snd_mss,
        snd_cwnd: info.tcpi_snd_cwnd,
        unacked: info.tcpi_unacked,
        notsent_bytes: has(offset_of!(libc::tcp_info, tcpi_notsent_bytes) + 4)
            .then_some(info.tcpi_notsent_bytes),
    })
}

/// Reads `TCP_INFO`: not on this system.
#[cfg(not(target_os = "linux"))]
pub fn tcp_info(_socket: &impl AsFd) -> io::Result<TcpInfo> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "TCP_INFO is read on Linux only",
    ))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn a_connection_that_exchanged_data_has_a_round_trip_time_and_nothing_outstanding() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        // A request and its answer: the server's data is acknowledged by the time the client
        // has read it and sent the next bytes, which the server then reads.
        for _ in 0..5 {
            server.write_all(&[7u8; 10_000]).unwrap();
            let mut got = vec![0u8; 10_000];
            client.read_exact(&mut got).unwrap();
            client.write_all(b"x").unwrap();
            let mut one = [0u8; 1];
            server.read_exact(&mut one).unwrap();
        }
        let info = tcp_info(&server).unwrap();
        assert!(info.rtt > Duration::ZERO, "{info:?}");
        assert!(info.snd_mss > 0 && info.snd_cwnd > 0, "{info:?}");
        if let Some(min) = info.min_rtt {
            assert!(min <= info.rtt + info.rtt_var * 4, "{info:?}");
        }
        assert_eq!(info.notsent_bytes.unwrap_or(0), 0, "{info:?}");
    }

    #[test]
    fn a_socket_that_is_not_tcp_is_an_error() {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(tcp_info(&udp).is_err());
    }
}
