//! Starting a node: the async runtime, binding its listener (TLS with ALPN, HTTP/1.1 and
//! HTTP/2 on one port, the connection limits), and the signals that stop it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use slipstream_http::listen::{self, Handler, Limits};

/// Where and how a node listens.
#[derive(Debug, Clone)]
pub struct Listen {
    /// The address.
    pub addr: SocketAddr,
    /// Certificate chain and key (PEM), for HTTPS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// What one client may cost.
    pub limits: Limits,
    /// How long a stopping node waits for requests in progress (see [`Running::drain`]).
    pub drain: std::time::Duration,
}

/// A listening node.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    /// The address it listens on (the port is real even when 0 was asked for).
    pub addr: SocketAddr,
    /// Whether clients speak TLS.
    pub tls: bool,
}

impl Bound {
    /// `http` or `https`.
    pub fn scheme(&self) -> &'static str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The TLS certificate or key is unusable.
    #[error(transparent)]
    Tls(#[from] listen::TlsError),
}

/// A node serving in the background, until it is drained.
#[derive(Debug)]
pub struct Running {
    /// Where it listens.
    pub bound: Bound,
    certificates: Option<Arc<listen::Certificates>>,
    stop: tokio::sync::oneshot::Sender<()>,
    served: tokio::task::JoinHandle<usize>,
    /// Listeners serving beside the main one (a prefetch listener), drained with it.
    beside: Vec<(
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<usize>,
    )>,
}

impl Running {
    /// Serves `handler` on `listener` (plain HTTP) too, with the main listener's limits, until
    /// the node is drained; the drain waits for its requests as for the main listener's.
    pub fn serve_beside<H: Handler>(
        &mut self,
        listener: tokio::net::TcpListener,
        handler: Arc<H>,
        listen: &Listen,
    ) {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(listen::serve(
            listener,
            None,
            listen.limits,
            handler,
            async move {
                let _ = stopped.await;
            },
            listen.drain,
        ));
        self.beside.push((stop, served));
    }

    /// Presents the certificate in `cert` and `key` from the next TLS handshake on (a reload);
    /// connections already open keep theirs. An error leaves the current certificate. Nothing
    /// to do for a plain-HTTP listener.
    pub fn reload_tls(
        &self,
        cert: &std::path::Path,
        key: &std::path::Path,
    ) -> Result<(), SpawnError> {
        match &self.certificates {
            Some(c) => Ok(c.reload(cert, key)?),
            None => Ok(()),
        }
    }

    /// Stops accepting and waits for the requests in progress to finish, for at most the
    /// listener's drain deadline. Returns how many connections were still open at the
    /// deadline.
    pub async fn drain(self) -> usize {
        let _ = self.stop.send(());
        let mut handles = vec![self.served];
        for (stop, served) in self.beside {
            let _ = stop.send(());
            handles.push(served);
        }
        let mut cut = 0;
        for h in handles {
            cut += h.await.unwrap_or(0);
        }
        cut
    }
}

/// Binds `listen` and serves `handler` on it in the background of the current runtime until
/// [`Running::drain`].
pub async fn start<H: Handler>(listen: &Listen, handler: Arc<H>) -> Result<Running, SpawnError> {
    let (listener, bound, tls) = bind(listen).await?;
    let (acceptor, certificates) = tls.unzip();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(listen::serve(
        listener,
        acceptor,
        listen.limits,
        handler,
        async move {
            let _ = stopped.await;
        },
        listen.drain,
    ));
    Ok(Running {
        bound,
        certificates,
        stop,
        served,
        beside: Vec::new(),
    })
}

async fn bind(
    listen: &Listen,
) -> Result<
    (
        tokio::net::TcpListener,
        Bound,
        Option<(
            slipstream_http::listen::TlsAcceptor,
            Arc<listen::Certificates>,
        )>,
    ),
    SpawnError,
> {
    let bind_error = |source| SpawnError::Bind {
        addr: listen.addr,
        source,
    };
    let listener = tokio::net::TcpListener::bind(listen.addr)
        .await
        .map_err(bind_error)?;
    let addr = listener.local_addr().map_err(bind_error)?;
    let tls = match &listen.tls {
        Some((cert, key)) => Some(listen::reloadable_tls(cert, key)?),
        None => None,
    };
    let bound = Bound {
        addr,
        tls: tls.is_some(),
    };
    Ok((listener, bound, tls))
}

/// Binds `listen` and serves `handler` on it in the background of the current runtime, for as
/// long as the runtime runs.
pub async fn spawn<H: Handler>(listen: &Listen, handler: Arc<H>) -> Result<Bound, SpawnError> {
    let (listener, bound, tls) = bind(listen).await?;
    tokio::spawn(listen::serve(
        listener,
        tls.map(|(acceptor, _)| acceptor),
        listen.limits,
        handler,
        std::future::pending(),
        listen.drain,
    ));
    Ok(bound)
}

/// A tokio runtime with `workers` threads (0 = one per core). One worker gets the
/// current-thread scheduler, which skips work-stealing bookkeeping that a single core cannot use.
pub fn runtime(workers: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut b = match workers {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            if n > 0 {
                b.worker_threads(n);
            }
            b
        }
    };
    b.enable_all().build()
}

/// What a signal asks of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// SIGTERM or SIGINT (Ctrl-C): drain and exit.
    Stop,
    /// SIGHUP: read the config again.
    Reload,
    /// SIGUSR1: open the log files again (after rotation).
    Reopen,
}

/// The signals a running node answers, registered once for its whole life (a signal that
/// arrives between two waits is kept, not lost).
#[derive(Debug)]
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
}

impl Signals {
    /// Takes over SIGTERM, SIGINT, SIGHUP and SIGUSR1 (so neither of the last two ends the
    /// process any more).
    pub fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
        })
    }

    /// The next signal.
    pub async fn next(&mut self) -> Asked {
        tokio::select! {
            _ = self.term.recv() => Asked::Stop,
            _ = self.int.recv() => Asked::Stop,
            _ = self.hup.recv() => Asked::Reload,
            _ = self.usr1.recv() => Asked::Reopen,
        }
    }
}
