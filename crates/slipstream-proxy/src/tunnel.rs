//! CONNECT (RFC 9110 §9.3.6): a forward proxy opens a TCP tunnel to `host:port` and relays
//! bytes both ways. Tunnels are never cached; the ports they may reach are configured, and the
//! addresses are those the access rules allow (`access.rs`), resolved once and connected to as
//! checked. A failure is answered in the same few words whatever its cause: the resolver's or
//! the OS's error would tell a client which hosts exist and which ports are open behind the
//! proxy; it goes to the log.

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use slipstream_http::Body;

use slipstream_node::respond::text;

use crate::access::ResolveError;
use crate::Inner;

pub(crate) async fn connect(inner: &Inner, req: Request<Incoming>) -> Response<Body> {
    if !inner.settings.forward {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "CONNECT needs a forward proxy (start without --origin, or with --forward)",
        );
    }
    let Some(authority) = req.uri().authority().cloned() else {
        return text(StatusCode::BAD_REQUEST, "CONNECT needs host:port");
    };
    let Some(port) = authority.port_u16() else {
        return text(StatusCode::BAD_REQUEST, "CONNECT needs host:port");
    };
    if !inner.settings.connect_ports.contains(&port) {
        return text(
            StatusCode::FORBIDDEN,
            &format!("CONNECT to port {port} is not allowed (connect_ports)"),
        );
    }
    let upstream = match tokio::time::timeout(
        inner.settings.connect_timeout,
        open(inner, authority.host(), port),
    )
    .await
    {
        Ok(Ok(stream)) => stream,
        Ok(Err(Failed::Refused(e))) => {
            tracing::info!(error = %e, "CONNECT target refused");
            return crate::forward::refused_destination();
        }
        Ok(Err(Failed::Other(e))) => {
            tracing::info!(target = %authority, error = %e, "CONNECT failed");
            return text(
                StatusCode::BAD_GATEWAY,
                "bad gateway: the proxy could not connect to that destination",
            );
        }
        Err(_) => {
            tracing::info!(target = %authority, "CONNECT timed out");
            return text(
                StatusCode::GATEWAY_TIMEOUT,
                "gateway timeout: connecting to that destination took too long",
            );
        }
    };
    let _ = upstream.set_nodelay(true);
    tokio::spawn(async move {
        match hyper::upgrade::on(req).await {
            Ok(upgraded) => {
                let mut client = TokioIo::new(upgraded);
                let mut upstream = upstream;
                if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
                    tracing::debug!(error = %e, "tunnel closed with an error");
                }
            }
            Err(e) => tracing::debug!(error = %e, "CONNECT upgrade failed"),
        }
    });
    // 200 with no body: the connection now carries the tunnel.
    Response::new(Body::empty())
}

enum Failed {
    Refused(crate::access::Refused),
    Other(std::io::Error),
}

/// A connection to the first address of `host:port` the access rules allow that accepts.
async fn open(inner: &Inner, host: &str, port: u16) -> Result<tokio::net::TcpStream, Failed> {
    let addrs = match inner.settings.access.resolve(host, port).await {
        Ok(addrs) => addrs,
        Err(ResolveError::Refused(r)) => return Err(Failed::Refused(r)),
        Err(ResolveError::Lookup { source, .. }) => return Err(Failed::Other(source)),
    };
    let mut last = None;
    for addr in addrs {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(Failed::Other(last.unwrap_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::NotFound, "no address")
    })))
}
