//! Starting a node: the async runtime, binding its listener (TLS with ALPN, HTTP/1.1 and
//! HTTP/2 on one port, the connection limits), and the signals that stop it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use slipstream_http::listen::{self, Handler, Limits};
use slipstream_http::nice::Pacing;

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
    /// Listeners serving beside the main one (a prefetch listener), drained with it, each
    /// with the runtime of its own thread if it has one.
    beside: Vec<Beside>,
}

#[derive(Debug)]
struct Beside {
    stop: tokio::sync::oneshot::Sender<()>,
    served: tokio::task::JoinHandle<usize>,
    runtime: Option<OwnRuntime>,
}

/// The CPU priority of a listener serving beside the main one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// On the node's own runtime, with its requests.
    Normal,
    /// On a thread of its own at the kernel's idle scheduling class (Linux `SCHED_IDLE`):
    /// whenever one of the node's other threads is runnable it runs first, so the listener
    /// gets only the CPU time nothing else wants. Where the class cannot be set, the thread
    /// is niced to 19 instead, and where that fails too it runs at normal priority (on its
    /// own thread all the same); [`Running::serve_beside`] says which.
    Idle,
}

/// What priority a listener's thread actually got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PriorityApplied {
    /// The node's own runtime.
    Shared,
    /// Its own thread, `SCHED_IDLE`.
    SchedIdle,
    /// Its own thread, nice 19 (`SCHED_IDLE` was refused).
    Nice19,
    /// Its own thread, at normal priority (both were refused).
    OwnThread,
}

/// A runtime on threads of its own, shut down without blocking when dropped (a runtime dropped
/// from async code would otherwise panic).
#[derive(Debug)]
struct OwnRuntime(Option<tokio::runtime::Runtime>);

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// Lowers the calling thread to `SCHED_IDLE`, else to nice 19; which one held.
#[cfg(target_os = "linux")]
fn lower_this_thread() -> PriorityApplied {
    use thread_priority::unix::{
        set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy,
        ThreadSchedulePolicy,
    };
    let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
    if set_thread_priority_and_policy(
        thread_native_id(),
        thread_priority::ThreadPriority::Min,
        idle,
    )
    .is_ok()
    {
        return PriorityApplied::SchedIdle;
    }
    // On Linux a nice value belongs to a thread, named by its thread id.
    let tid = rustix::thread::gettid();
    if rustix::process::setpriority_process(Some(tid), 19).is_ok() {
        return PriorityApplied::Nice19;
    }
    PriorityApplied::OwnThread
}

#[cfg(not(target_os = "linux"))]
fn lower_this_thread() -> PriorityApplied {
    PriorityApplied::OwnThread
}

impl Running {
    /// Serves `handler` on `listener` (plain HTTP) too, with the main listener's limits, until
    /// the node is drained; the drain waits for its requests as for the main listener's.
    /// At [`Priority::Idle`] it is served by a runtime on a thread of its own at low CPU
    /// priority; the answer says what that thread got, or why it could not be started. With
    /// `pacing`, every connection's writes back off as its round-trip time rises
    /// ([`slipstream_http::nice`]).
    pub fn serve_beside<H: Handler>(
        &mut self,
        listener: tokio::net::TcpListener,
        handler: Arc<H>,
        listen: &Listen,
        priority: Priority,
        pacing: Option<Pacing>,
    ) -> std::io::Result<PriorityApplied> {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (limits, drain) = (listen.limits, listen.drain);
        let serve = |listener| {
            listen::serve_paced(
                listener,
                None,
                limits,
                handler,
                async move {
                    let _ = stopped.await;
                },
                drain,
                pacing,
            )
        };
        let (served, runtime, applied) = match priority {
            Priority::Normal => (tokio::spawn(serve(listener)), None, PriorityApplied::Shared),
            Priority::Idle => {
                // Every thread of the runtime lowers itself as it starts (its worker, and any
                // blocking-pool thread later); the worker, started by `build`, says first.
                let (said, heard) = std::sync::mpsc::channel();
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("slipstream-low")
                    .on_thread_start(move || {
                        let _ = said.send(lower_this_thread());
                    })
                    .enable_all()
                    .build()?;
                // A wait of the thread's start-up, once, while the node starts.
                let applied = heard
                    .recv_timeout(std::time::Duration::from_secs(5))
                    .map_err(|_| std::io::Error::other("the low-priority thread did not start"))?;
                // The listener moves to the new runtime's reactor, so its connections are
                // polled there and not by the node's own thread.
                let std_listener = listener.into_std()?;
                let listener = {
                    let _in = rt.enter();
                    tokio::net::TcpListener::from_std(std_listener)?
                };
                let served = rt.spawn(serve(listener));
                (served, Some(OwnRuntime(Some(rt))), applied)
            }
        };
        self.beside.push(Beside {
            stop,
            served,
            runtime,
        });
        Ok(applied)
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
        let mut runtimes = Vec::new();
        for b in self.beside {
            let _ = b.stop.send(());
            handles.push(b.served);
            runtimes.extend(b.runtime);
        }
        let mut cut = 0;
        for h in handles {
            cut += h.await.unwrap_or(0);
        }
        drop(runtimes);
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
