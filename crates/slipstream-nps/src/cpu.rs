//! The node's own load: the CPU its process used over an epoch, as a fraction of the CPU it may
//! use (its cgroup's quota, and the cores it may run on).
//!
//! The paper's monitor sees load only through probes (000 §3.3). A probe's response time stays
//! flat until the server is nearly saturated and then rises within an epoch or two (on this
//! machine: 50–130 µs right up to a collapse, docs/experiments/000-nps.md), so no threshold
//! warns in time; near capacity an open-loop load then leaves a backlog that never drains. The
//! process's CPU use rises in proportion to the load it serves, well before the cliff, so the
//! monitor also keeps it under a target ([`slipstream_prefetch::monitor::MonitorConfig::load_target`]).
//!
//! Threads at idle priority count by default (`cpu_count_idle`). A thread in `SCHED_IDLE`
//! (or at nice 19, where the kernel refused that), such as the prefetch listener's with
//! `listener_priority = "idle"`, is preempted whenever another thread wants its CPU, so it
//! might seem to use only CPU no other thread was waiting for. That does not make its work
//! free: on our test machine a busy idle-priority thread still slowed demand (pilots 48, 49
//! and 56 in docs/experiments/000-nps.md; the likely causes, the kernel's network work for
//! the data it sends and vCPUs sharing a physical core, are not measured), and the probes do
//! not see that cost.
//! Counted, its work is bounded by the target like demand's; a meter made to leave such threads
//! out (`CpuMeter::new(false)`) lets the probes alone bound it.
//!
//! Linux only: CPU time from `/proc/self/task/*/schedstat` (nanoseconds on CPU per thread), the
//! allowance from `/proc/self/cgroup` and the cgroup files (v1 `cpu.cfs_quota_us` and
//! `cpu.cfs_period_us`, v2 `cpu.max`). Elsewhere [`CpuMeter::new`] is `None` and the monitor
//! runs on probes alone.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the allowance is read again (a process can be moved into a cgroup, or its quota
/// changed, while it runs).
const ALLOWANCE_EVERY: Duration = Duration::from_secs(1);

/// Measures the process's CPU load between calls to [`CpuMeter::sample`].
#[derive(Debug)]
pub struct CpuMeter {
    /// Count threads at idle priority.
    count_idle: bool,
    /// Each thread's times at the last sample.
    threads: HashMap<u32, Times>,
    at: Instant,
    allowance: f64,
    allowance_at: Instant,
    /// The demand threads' run-queue delay over the last sample's interval, per second.
    wait: Option<f64>,
}

/// One thread's `schedstat` times, and whether it runs at idle priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Times {
    /// Nanoseconds on a CPU.
    cpu: u64,
    /// Nanoseconds runnable but waiting for a CPU (the run-queue delay).
    wait: u64,
    idle: bool,
}

impl CpuMeter {
    /// A meter starting now, or `None` where the process's CPU time cannot be read. With
    /// `count_idle`, threads at idle priority count too.
    pub fn new(count_idle: bool) -> Option<CpuMeter> {
        let threads = thread_times()?;
        let now = Instant::now();
        Some(CpuMeter {
            count_idle,
            threads,
            at: now,
            allowance: allowance(),
            allowance_at: now,
            wait: None,
        })
    }

    /// The CPU the process may use, in cores, as last read.
    pub fn allowance(&self) -> f64 {
        self.allowance
    }

    /// The load since the last call: CPU time used over the time passed times the allowance
    /// (1.0: every bit of CPU the process may have). `None` when it cannot be read or no time
    /// has passed. A thread that ended since the last call loses its last slice (its CPU time
    /// is gone with it), so the load is at worst slightly under.
    pub fn sample(&mut self) -> Option<f64> {
        let now = Instant::now();
        if now.duration_since(self.allowance_at) >= ALLOWANCE_EVERY {
            self.allowance = allowance();
            self.allowance_at = now;
        }
        let Some(threads) = thread_times() else {
            self.wait = None;
            return None;
        };
        let (used, waited) = used_and_waited(&self.threads, &threads, self.count_idle);
        let wall = now.duration_since(self.at).as_secs_f64();
        self.threads = threads;
        self.at = now;
        self.wait = (wall > 0.0).then(|| waited as f64 / 1e9 / wall);
        (wall > 0.0 && self.allowance > 0.0).then(|| used as f64 / 1e9 / wall / self.allowance)
    }

    /// The run-queue delay of the threads not at idle priority (demand's: they serve demand,
    /// probes and hint requests) over the last [`CpuMeter::sample`]'s interval, in seconds per
    /// second: the time they were ready to run and waited for a CPU. Unlike the load it sees
    /// what other threads and processes take from demand (the prefetch listener's threads at
    /// idle priority, the kernel's work, another process on the core), not what demand's own
    /// work takes: one thread busier does not wait longer for the CPU, its requests wait longer
    /// in its queue, which `schedstat` does not see. `None` before the first sample or when it
    /// could not be read.
    pub fn demand_wait(&self) -> Option<f64> {
        self.wait
    }
}

/// The CPU nanoseconds used between `before` and `after` (by threads at idle priority only with
/// `count_idle`), and the run-queue nanoseconds of the threads not at idle priority. A thread
/// new since `before` counts from zero.
fn used_and_waited(
    before: &HashMap<u32, Times>,
    after: &HashMap<u32, Times>,
    count_idle: bool,
) -> (u64, u64) {
    let (mut used, mut waited) = (0u64, 0u64);
    for (tid, t) in after {
        let (cpu, wait) = before.get(tid).map_or((0, 0), |b| (b.cpu, b.wait));
        if count_idle || !t.idle {
            used += t.cpu.saturating_sub(cpu);
        }
        if !t.idle {
            waited += t.wait.saturating_sub(wait);
        }
    }
    (used, waited)
}

/// Each thread's `schedstat` times and priority.
fn thread_times() -> Option<HashMap<u32, Times>> {
    let mut times = HashMap::new();
    for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        // A thread may end between the listing and the reads.
        let idle = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .is_some_and(|s| at_idle_priority(&s));
        if let Some((cpu, wait)) = std::fs::read_to_string(entry.path().join("schedstat"))
            .ok()
            .and_then(|s| parse_schedstat(&s))
        {
            times.insert(tid, Times { cpu, wait, idle });
        }
    }
    (!times.is_empty()).then_some(times)
}

/// `SCHED_IDLE`'s number in a `stat` line's policy field.
const SCHED_IDLE: u32 = 5;

/// Whether a thread's `stat` line (proc(5)) shows it at idle priority: policy `SCHED_IDLE`
/// (field 41), or nice 19 (field 19). The command name (field 2) is in parentheses and may
/// hold spaces or parentheses itself, so the fields are counted from the last `)`.
fn at_idle_priority(stat: &str) -> bool {
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return false;
    };
    // `rest` starts at field 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<i64>().ok());
    field(41) == Some(i64::from(SCHED_IDLE)) || field(19) == Some(19)
}

/// The first two fields of a `schedstat` line: nanoseconds on a CPU, and nanoseconds waiting
/// on a run queue.
fn parse_schedstat(s: &str) -> Option<(u64, u64)> {
    let mut fields = s.split_whitespace();
    let cpu = fields.next()?.parse().ok()?;
    let wait = fields.next()?.parse().ok()?;
    Some((cpu, wait))
}

/// The CPU the process may use, in cores: the cores it may run on, and no more than its
/// cgroups' quotas.
pub fn allowance() -> f64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let quota = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|s| cgroup_quota(&s, Path::new("/sys/fs/cgroup")));
    quota.map_or(cores, |q| q.min(cores))
}

/// The smallest CPU quota (in cores) on the process's cgroup path or above it, for the
/// `/proc/self/cgroup` text `cgroups` with the cgroup file systems under `root`; `None` if no
/// quota is set.
fn cgroup_quota(cgroups: &str, root: &Path) -> Option<f64> {
    let mut quotas = Vec::new();
    for line in cgroups.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            // cgroup v2: one hierarchy, mounted at the root or at `unified` beside v1's.
            for base in [root.to_path_buf(), root.join("unified")] {
                quotas.extend(walk_up(&base, path, |dir| {
                    parse_cpu_max(&std::fs::read_to_string(dir.join("cpu.max")).ok()?)
                }));
            }
        } else if controllers.split(',').any(|c| c == "cpu") {
            for base in [root.join("cpu"), root.join(controllers)] {
                quotas.extend(walk_up(&base, path, |dir| {
                    let quota = std::fs::read_to_string(dir.join("cpu.cfs_quota_us")).ok()?;
                    let period = std::fs::read_to_string(dir.join("cpu.cfs_period_us")).ok()?;
                    parse_cfs(&quota, &period)
                }));
            }
        }
    }
    quotas.into_iter().reduce(f64::min)
}

/// `read` at `base/path` and at each directory above it up to `base`.
fn walk_up(base: &Path, path: &str, read: impl Fn(&Path) -> Option<f64>) -> Vec<f64> {
    let mut dir = PathBuf::from(path.trim_start_matches('/'));
    let mut found = Vec::new();
    loop {
        found.extend(read(&base.join(&dir)));
        if !dir.pop() {
            return found;
        }
    }
}

/// cgroup v1: `cpu.cfs_quota_us` over `cpu.cfs_period_us`; `None` for no quota (-1).
fn parse_cfs(quota: &str, period: &str) -> Option<f64> {
    let quota: i64 = quota.trim().parse().ok()?;
    let period: i64 = period.trim().parse().ok()?;
    (quota > 0 && period > 0).then(|| quota as f64 / period as f64)
}

/// cgroup v2: `cpu.max` is `QUOTA PERIOD` or `max PERIOD`.
fn parse_cpu_max(s: &str) -> Option<f64> {
    let mut fields = s.split_whitespace();
    let quota: f64 = fields.next()?.parse().ok()?;
    let period: f64 = fields.next()?.parse().ok()?;
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_files_parse() {
        assert_eq!(parse_cfs("50000\n", "100000\n"), Some(0.5));
        assert_eq!(parse_cfs("-1\n", "100000\n"), None);
        assert_eq!(parse_cfs("junk", "100000"), None);
        assert_eq!(parse_cpu_max("150000 100000\n"), Some(1.5));
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max(""), None);
        assert_eq!(
            parse_schedstat("534362626 156095 43\n"),
            Some((534_362_626, 156_095))
        );
        assert_eq!(parse_schedstat("534362626"), None);
        assert_eq!(parse_schedstat(""), None);
    }

    #[test]
    fn demand_waits_are_the_threads_not_at_idle_priority() {
        let t = |cpu, wait, idle| Times { cpu, wait, idle };
        let before = HashMap::from([(1, t(100, 10, false)), (2, t(1000, 500, true))]);
        let after = HashMap::from([
            (1, t(300, 40, false)),
            (2, t(1600, 900, true)),
            // New since: counts from zero.
            (3, t(50, 5, false)),
        ]);
        // Load without idle threads: 200 + 50; with them, 600 more. The wait is demand's only.
        assert_eq!(used_and_waited(&before, &after, false), (250, 35));
        assert_eq!(used_and_waited(&before, &after, true), (850, 35));
        // A counter that went backwards (a reused thread id) counts as nothing, not as a wrap.
        let reused = HashMap::from([(1, t(50, 5, false))]);
        assert_eq!(used_and_waited(&before, &reused, false), (0, 0));
    }

    #[test]
    fn the_smallest_quota_on_the_path_counts() {
        let root = std::env::temp_dir().join(format!("slipstream-cpu-{}", std::process::id()));
        let write = |dir: &str, quota: &str, period: &str| {
            let d = root.join(dir);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cpu.cfs_quota_us"), quota).unwrap();
            std::fs::write(d.join("cpu.cfs_period_us"), period).unwrap();
        };
        // v1: the group allows 1.5 cores, its parent 0.5.
        write("cpu", "-1", "100000");
        write("cpu/parent", "1000", "2000");
        write("cpu/parent/nps", "3000", "2000");
        let v1 = "12:pids:/\n3:cpu,cpuacct:/parent/nps\n1:memory:/x\n";
        assert_eq!(cgroup_quota(v1, &root), Some(0.5));
        // v2 beside it, at `unified`: 0.25 cores.
        let d = root.join("unified/svc");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cpu.max"), "25000 100000\n").unwrap();
        assert_eq!(cgroup_quota(&format!("{v1}0::/svc\n"), &root), Some(0.25));
        // Nothing set anywhere, or lines that are not cgroup lines.
        assert_eq!(cgroup_quota("3:cpu:/elsewhere\nnot a line\n", &root), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn stat_lines_at_idle_priority_are_recognised() {
        // proc(5) fields 3.., with a command name holding a space and a parenthesis.
        let line = |nice: i64, policy: u32| {
            let mut f: Vec<String> = (3..=52).map(|_| "0".to_owned()).collect();
            f[19 - 3] = nice.to_string();
            f[41 - 3] = policy.to_string();
            format!("1234 (idle) x) {}", f.join(" "))
        };
        assert!(at_idle_priority(&line(0, SCHED_IDLE)));
        assert!(at_idle_priority(&line(19, 0)));
        assert!(!at_idle_priority(&line(0, 0)));
        assert!(!at_idle_priority(&line(-5, 1)));
        assert!(!at_idle_priority("garbage"));
        assert!(!at_idle_priority("1 (short) S 1"));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_thread_at_idle_priority_is_load_only_when_counted() {
        use std::sync::mpsc;
        let (lowered_tx, lowered_rx) = mpsc::channel();
        let (sampled_tx, sampled_rx) = mpsc::channel::<()>();
        let spinner = std::thread::spawn(move || {
            // Nice 19 needs no privilege (SCHED_IDLE may not be allowed everywhere).
            let tid = rustix::thread::gettid();
            rustix::process::setpriority_process(Some(tid), 19).expect("nice 19");
            let start = Instant::now();
            let mut x = 0u64;
            while start.elapsed() < Duration::from_millis(50) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            lowered_tx
                .send(tid.as_raw_nonzero().get() as u32)
                .expect("send");
            // Alive until the meter has looked: a thread that ended is not counted anyway.
            let _ = sampled_rx.recv();
        });
        let tid = lowered_rx.recv().expect("the spinning thread's id");
        let meter = CpuMeter::new(false).expect("/proc/self/task/*/schedstat on Linux");
        let counting = CpuMeter::new(true).expect("/proc/self/task/*/schedstat on Linux");
        sampled_tx.send(()).expect("send");
        spinner.join().expect("the spinning thread");
        // Other tests run threads in this process too, so the load itself proves little: the
        // meter must not count the lowered thread at all, and must count this one.
        let me = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        assert!(meter.threads[&tid].idle, "{tid} not seen at idle priority");
        assert!(!meter.threads[&me].idle, "{me} seen at idle priority");
        assert!(!meter.count_idle && counting.count_idle);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_busy_thread_shows_as_load() {
        let mut meter = CpuMeter::new(false).expect("/proc/self/task/*/schedstat on Linux");
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let load = meter.sample().expect("a load after 200 ms");
        // One thread spinning for the whole interval: at least a core's worth over the
        // allowance, less whatever the machine took from it.
        assert!(
            load * meter.allowance() > 0.5,
            "load {load} × allowance {}",
            meter.allowance()
        );
    }
}
