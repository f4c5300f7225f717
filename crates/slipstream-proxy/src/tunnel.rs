//! CONNECT (RFC 9110 §9.3.6): a forward proxy opens a TCP tunnel to `host:port` and relays
//! bytes both ways. Tunnels are never cached; the ports they may reach are configured.

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use slipstream_http::Body;

use slipstream_node::respond::text;

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
        tokio::net::TcpStream::connect(authority.as_str()),
    )
    .await
    {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            return text(
                StatusCode::BAD_GATEWAY,
                &format!("cannot connect to {authority}: {e}"),
            )
        }
        Err(_) => {
            return text(
                StatusCode::GATEWAY_TIMEOUT,
                &format!("connecting to {authority} timed out"),
            )
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
