//! `slipstream get URL`: the native Web++ client (001 §3). It asks the URL's server (or
//! `--resolver`) for the URL's replicas (`/_slipstream/resolve`), binds the URL to a replica
//! with the Refresh selector the browser agent uses (`slipstream-select`), times the request
//! out at the selector's percentile and fails over to the next replica, and last to the plain
//! URL. The latency table lives for the process: `--repeat N` fetches N times with it, and
//! says which replica answered each time.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use slipstream_select::config::Refresh as Config;
use slipstream_select::Refresh;
use slipstream_select::{Outcome, Select};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The URL to fetch (http://).
    pub url: String,
    /// The server whose `/_slipstream/resolve` names the replicas [default: the URL's own].
    #[arg(long, value_name = "BASE_URL")]
    pub resolver: Option<String>,
    /// Write the body here instead of standard output.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Fetch this many times with one latency table (the body is written once, from the last).
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
}

/// A plain-HTTP client for small bodiless requests (resolutions, fetches).
pub type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

/// A pooled [`HttpClient`].
pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let url: Uri = args
        .url
        .parse()
        .with_context(|| format!("`{}` is not a URL", args.url))?;
    if url.scheme_str() != Some("http") || url.authority().is_none() {
        bail!("`slipstream get` fetches http:// URLs (https is not supported yet)");
    }
    if args.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(fetch(args, url))
}

async fn fetch(args: Args, url: Uri) -> anyhow::Result<()> {
    let client = client();
    let base = match &args.resolver {
        Some(r) => r.trim_end_matches('/').to_owned(),
        None => format!(
            "http://{}",
            url.authority().expect("checked in run").as_str()
        ),
    };
    let replicas = resolve(&client, &base, &args.url).await?;
    let endpoints: Vec<String> = replicas.iter().map(|r| endpoint_of(r)).collect();
    let mut distinct = endpoints.clone();
    distinct.sort();
    distinct.dedup();
    let mut selector = Refresh::new(&distinct, Config::default(), Instant::now())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!(
        "{}: {} replica(s) {}",
        args.url,
        replicas.len(),
        if replicas.is_empty() {
            "; fetching the URL itself".to_owned()
        } else {
            format!("on {}", distinct.join(", "))
        }
    );
    let mut body = Bytes::new();
    for round in 1..=args.repeat {
        let (from, got, tried) = once(&client, &mut selector, &replicas, &args.url).await?;
        eprintln!(
            "[{round}] {} from {from} in {:.1} ms{}",
            got.status,
            got.latency.as_secs_f64() * 1e3,
            if tried > 1 {
                format!(" (after {} failed)", tried - 1)
            } else {
                String::new()
            }
        );
        body = got.body;
    }
    match &args.output {
        Some(path) => {
            std::fs::write(path, &body).with_context(|| format!("writing {}", path.display()))?
        }
        None => std::io::stdout()
            .write_all(&body)
            .context("writing to standard output")?,
    }
    Ok(())
}

/// The replicas a cluster member at `base` names for `url` (its `/_slipstream/resolve`); none
/// when `base` is not a cluster member (404).
pub async fn resolve(client: &HttpClient, base: &str, url: &str) -> anyhow::Result<Vec<String>> {
    let query: String = form_urlencoded::byte_serialize(url.as_bytes()).collect();
    let uri: Uri = format!("{base}/_slipstream/resolve?url={query}")
        .parse()
        .context("the resolver's URL")?;
    let response = client
        .get(uri.clone())
        .await
        .with_context(|| format!("asking {uri}"))?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .with_context(|| format!("reading {uri}"))?
        .to_bytes();
    if status == StatusCode::NOT_FOUND {
        // Not a cluster member: the URL is its own only replica.
        return Ok(Vec::new());
    }
    if !status.is_success() {
        bail!(
            "{uri}: {status}: {}",
            String::from_utf8_lossy(&bytes).trim()
        );
    }
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).with_context(|| format!("{uri}: not JSON"))?;
    let list = v["replicas"]
        .as_array()
        .with_context(|| format!("{uri}: no `replicas` list"))?;
    list.iter()
        .map(|r| {
            r.as_str()
                .filter(|s| s.starts_with("http://"))
                .map(str::to_owned)
                .with_context(|| format!("{uri}: `{r}` is not an http:// URL"))
        })
        .collect()
}

/// `scheme://authority` of a physical URL: the endpoint the selector measures.
fn endpoint_of(url: &str) -> String {
    url.parse::<Uri>()
        .ok()
        .and_then(|u| Some(format!("{}://{}", u.scheme_str()?, u.authority()?)))
        .unwrap_or_else(|| url.to_owned())
}

struct Got {
    status: StatusCode,
    latency: Duration,
    body: Bytes,
}

/// One fetch: the replicas in the selector's order, each within its timeout, then the plain URL.
/// Returns the URL that answered, the answer, and how many URLs were tried.
async fn once(
    client: &HttpClient,
    selector: &mut Refresh,
    replicas: &[String],
    plain: &str,
) -> anyhow::Result<(String, Got, usize)> {
    let mut tried = Vec::new();
    let order = selector.order(Instant::now());
    for endpoint in &order {
        let Some(replica) = replicas.iter().find(|r| endpoint_of(r) == *endpoint) else {
            continue;
        };
        let now = Instant::now();
        let timeout = selector
            .timeout(endpoint, now)
            .unwrap_or(Duration::from_secs(10));
        selector.started(endpoint, now);
        let (outcome, got) = attempt(client, replica, timeout).await;
        selector.record(endpoint, outcome, Instant::now());
        match got {
            Ok(got) => return Ok((replica.clone(), got, tried.len() + 1)),
            Err(why) => tried.push(format!("{replica}: {why}")),
        }
    }
    let (_, got) = attempt(client, plain, Duration::from_secs(30)).await;
    match got {
        Ok(got) => Ok((plain.to_owned(), got, tried.len() + 1)),
        Err(why) => {
            tried.push(format!("{plain}: {why}"));
            bail!("every replica failed:\n  {}", tried.join("\n  "))
        }
    }
}

/// One request, timed out after `timeout` without a response head; a 5xx counts as broken.
async fn attempt(
    client: &HttpClient,
    url: &str,
    timeout: Duration,
) -> (Outcome, Result<Got, String>) {
    let uri: Uri = match url.parse() {
        Ok(u) => u,
        Err(e) => return (Outcome::Broken, Err(format!("not a URL: {e}"))),
    };
    let request = match Request::get(uri).body(Empty::new()) {
        Ok(r) => r,
        Err(e) => return (Outcome::Broken, Err(e.to_string())),
    };
    let start = Instant::now();
    let response = match tokio::time::timeout(timeout, client.request(request)).await {
        Err(_) => return (Outcome::TimedOut, Err(format!("no answer in {timeout:?}"))),
        Ok(Err(e)) if e.is_connect() => {
            return (Outcome::ConnectFailed, Err(format!("cannot connect: {e}")))
        }
        Ok(Err(e)) => return (Outcome::Broken, Err(e.to_string())),
        Ok(Ok(r)) => r,
    };
    let latency = start.elapsed();
    let status = response.status();
    if status.is_server_error() {
        return (Outcome::Broken, Err(format!("answered {status}")));
    }
    match response.into_body().collect().await {
        Ok(body) => (
            Outcome::Answered { latency },
            Ok(Got {
                status,
                latency,
                body: body.to_bytes(),
            }),
        ),
        Err(e) => (Outcome::Broken, Err(format!("body broke: {e}"))),
    }
}
