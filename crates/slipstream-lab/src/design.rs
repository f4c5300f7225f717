//! Full-factorial experiment designs (paper 003's Table 1): a base scenario and factors, each a
//! dotted scenario field with a list of values. Every combination is one run, written under
//! `OUT/runs/NAME/`; a run whose `summary.json` exists is not redone, so an interrupted design
//! resumes where it stopped. Runs go in parallel on every core.
//!
//! ```toml
//! base = "baseline.toml"
//! [factors]
//! "workload.rate" = [10, 20, 40, 80]
//! "hits" = [{ child = 0.40, parent = 0.15 }, { child = 0.20, parent = 0.07 }]
//! ```
//!
//! The factor `"."` takes whole tables that are merged into the scenario, each named by its
//! `name` key: a list of one-factor-at-a-time panels rather than a factorial.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;
use slipstream_sim::scenario::{Plan, Scenario, ScenarioError};

use crate::output::{self, Summary};

/// A design that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum DesignError {
    /// Reading or parsing a file failed.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What failed.
        message: String,
    },
    /// A factor names no scenario field or has no levels.
    #[error("{path}: factor `{factor}`: {message}")]
    Factor {
        /// The design file.
        path: String,
        /// The factor.
        factor: String,
        /// What is wrong.
        message: String,
    },
    /// A combination makes an invalid scenario.
    #[error("run {run}: {source}")]
    Scenario {
        /// The run's name.
        run: String,
        /// Why.
        source: ScenarioError,
    },
    /// Writing results failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The thread pool could not be started.
    #[error("cannot start {threads} threads: {source}")]
    Pool {
        /// Threads asked for.
        threads: usize,
        /// Why.
        source: rayon::ThreadPoolBuildError,
    },
}

/// One run of a design.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// Directory name: the factor levels, e.g. `rate=40,hits=0.40-0.15`.
    pub name: String,
    /// Factor name → level, as written.
    pub levels: Vec<(String, String)>,
    /// The scenario, as TOML text.
    pub scenario: String,
}

/// Reads a design and expands it into runs.
pub fn expand(path: &Path) -> Result<Vec<RunSpec>, DesignError> {
    let file_err = |p: &Path, message: String| DesignError::File {
        path: p.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file_err(path, e.to_string()))?;
    let design: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| file_err(path, e.to_string()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let base = match design.get("base") {
        Some(toml::Value::String(b)) => {
            let base_path = dir.join(b);
            let base_text = std::fs::read_to_string(&base_path)
                .map_err(|e| file_err(&base_path, e.to_string()))?;
            base_text
                .parse::<toml::Table>()
                .map_err(|e| file_err(&base_path, e.to_string()))?
        }
        Some(_) => return Err(file_err(path, "`base` must be a file name".into())),
        None => toml::Table::new(),
    };
    let factor_err = |factor: &str, message: &str| DesignError::Factor {
        path: path.display().to_string(),
        factor: factor.to_owned(),
        message: message.to_owned(),
    };
    let mut factors: Vec<(String, Vec<toml::Value>)> = Vec::new();
    if let Some(table) = design.get("factors") {
        let toml::Value::Table(table) = table else {
            return Err(file_err(path, "`factors` must be a table".into()));
        };
        for (name, levels) in table {
            let toml::Value::Array(levels) = levels else {
                return Err(factor_err(name, "levels must be a list"));
            };
            if levels.is_empty() {
                return Err(factor_err(name, "needs at least one level"));
            }
            factors.push((name.clone(), levels.clone()));
        }
    }
    for key in design.keys() {
        if key != "base" && key != "factors" {
            return Err(file_err(
                path,
                format!("unknown key `{key}` (a design has `base` and `[factors]`)"),
            ));
        }
    }
    let total: usize = factors.iter().map(|(_, l)| l.len()).product();
    let mut runs = Vec::with_capacity(total);
    for mut i in 0..total {
        let mut scenario = base.clone();
        let mut levels = Vec::new();
        for (name, values) in &factors {
            let value = &values[i % values.len()];
            i /= values.len();
            if name == "." {
                let toml::Value::Table(panel) = value else {
                    return Err(factor_err(name, "levels of `.` must be tables"));
                };
                let mut panel = panel.clone();
                let label = match panel.remove("name") {
                    Some(toml::Value::String(n)) => n,
                    _ => return Err(factor_err(name, "each level of `.` needs a `name`")),
                };
                merge(&mut scenario, panel);
                levels.push(("panel".to_owned(), label));
                continue;
            }
            set(&mut scenario, name, value.clone()).map_err(|m| factor_err(name, &m))?;
            levels.push((short(name).to_owned(), level_text(value)));
        }
        let name = match levels.as_slice() {
            [] => "base".to_owned(),
            [(k, v)] if k == "panel" => v.clone(),
            _ => levels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(","),
        };
        scenario.insert("name".into(), toml::Value::String(name.clone()));
        runs.push(RunSpec {
            name,
            levels,
            scenario: toml::to_string(&scenario).map_err(|e| file_err(path, e.to_string()))?,
        });
    }
    // Check every combination before running any.
    for run in &runs {
        plan(run, dir)?;
    }
    Ok(runs)
}

fn plan(run: &RunSpec, dir: &Path) -> Result<Plan, DesignError> {
    let as_file = dir.join(format!("{}.toml", run.name));
    let scenario: Scenario = toml::from_str(&run.scenario).map_err(|e| DesignError::Scenario {
        run: run.name.clone(),
        source: ScenarioError::Syntax {
            path: as_file.display().to_string(),
            message: e.to_string(),
        },
    })?;
    scenario
        .plan(&as_file, &run.scenario)
        .map_err(|source| DesignError::Scenario {
            run: run.name.clone(),
            source,
        })
}

/// Deep-merges `over` into `base`: tables merge, anything else replaces.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Sets a dotted path in a TOML table, creating tables on the way.
fn set(table: &mut toml::Table, path: &str, value: toml::Value) -> Result<(), String> {
    let mut parts = path.split('.').peekable();
    let mut cur = table;
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            cur.insert(part.to_owned(), value);
            return Ok(());
        }
        let entry = cur
            .entry(part.to_owned())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = match entry {
            toml::Value::Table(t) => t,
            _ => return Err(format!("`{part}` is not a table")),
        };
    }
    Err("empty factor name".into())
}

fn short(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

fn level_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Array(a) => a.iter().map(level_text).collect::<Vec<_>>().join("-"),
        toml::Value::Table(t) => t.values().map(level_text).collect::<Vec<_>>().join("-"),
        other => other.to_string(),
    }
}

/// Runs every run not already finished on a pool of `threads` threads (at least 1), calling
/// `progress(done, total)` after each. Returns every run's summary (finished earlier or now), in
/// design order. After the first failed run no new run starts, and that error is returned.
pub fn run_all(
    runs: &[RunSpec],
    design_dir: &Path,
    out: &Path,
    threads: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<(RunSpec, Summary)>, DesignError> {
    let threads = threads.max(1);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("design-{i}"))
        .build()
        .map_err(|source| DesignError::Pool { threads, source })?;
    let done = AtomicUsize::new(0);
    let summaries: Vec<Summary> = pool.install(|| {
        runs.par_iter()
            .map(|run| {
                let summary = run_one(run, design_dir, out)?;
                progress(done.fetch_add(1, Ordering::Relaxed) + 1, runs.len());
                Ok(summary)
            })
            .collect::<Result<_, DesignError>>()
    })?;
    Ok(runs.iter().cloned().zip(summaries).collect())
}

fn run_one(run: &RunSpec, design_dir: &Path, out: &Path) -> Result<Summary, DesignError> {
    let dir: PathBuf = out.join("runs").join(&run.name);
    // A finished run is kept only if it ran this very scenario: a changed design or base
    // file runs it again.
    let same_scenario =
        std::fs::read_to_string(dir.join("scenario.toml")).is_ok_and(|saved| saved == run.scenario);
    if same_scenario {
        if let Ok(text) = std::fs::read_to_string(dir.join("summary.json")) {
            if let Ok(summary) = serde_json::from_str::<Summary>(&text) {
                return Ok(summary);
            }
        }
    }
    let plan = plan(run, design_dir)?;
    let started = std::time::Instant::now();
    let result = plan.run(None);
    let (csv, summary) = output::summarise(
        &plan.name,
        &plan.jobs,
        &result,
        started.elapsed().as_secs_f64(),
        plan.achieved,
    );
    let write_err = |source| DesignError::Write {
        path: dir.display().to_string(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(write_err)?;
    std::fs::write(dir.join("scenario.toml"), &run.scenario).map_err(write_err)?;
    // summary.json last: its presence marks the run finished.
    output::write(&dir, &csv, &summary).map_err(write_err)?;
    Ok(summary)
}

/// One row per run: factor levels, then per-source latency statistics.
pub fn results_csv(results: &[(RunSpec, Summary)]) -> String {
    let mut out = String::new();
    if let Some((first, _)) = results.first() {
        for (k, _) in &first.levels {
            out.push_str(k);
            out.push(',');
        }
    }
    out.push_str("n,drops,mean_s,child_mean_s,parent_mean_s,origin_mean_s,child_sd_s,parent_sd_s,origin_sd_s,p90_s,child_share,parent_share,wall_s\n");
    for (run, s) in results {
        for (_, v) in &run.levels {
            out.push_str(&v.replace(',', ";"));
            out.push(',');
        }
        out.push_str(&format!(
            "{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.4},{:.4},{:.3}\n",
            s.completed,
            s.drops,
            s.all.mean_s,
            s.child.mean_s,
            s.parent.mean_s,
            s.origin.mean_s,
            s.child.sd_s,
            s.parent.sd_s,
            s.origin.sd_s,
            s.all.p90_s,
            s.child.n as f64 / s.completed.max(1) as f64,
            s.parent.n as f64 / s.completed.max(1) as f64,
            s.wall_s
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_the_full_factorial_and_resumes() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("base.toml"), "[workload]\ntransfers = 50\n")
            .expect("write");
        let design = dir.path().join("d.toml");
        std::fs::write(&design, "base = \"base.toml\"\n[factors]\n\"workload.rate\" = [10, 40]\n\"hits\" = [{ child = 0.4, parent = 0.15 }, { child = 0.2, parent = 0.07 }, { child = 0.3, parent = 0.1 }]\n").expect("write");
        let runs = expand(&design).expect("valid design");
        assert_eq!(runs.len(), 6);
        assert_eq!(runs[0].name, "hits=0.4-0.15,rate=10");
        let out = dir.path().join("out");
        let results = run_all(&runs, dir.path(), &out, 2, &|_, _| {}).expect("runs");
        assert_eq!(results.len(), 6);
        assert!(out
            .join("runs")
            .join(&runs[3].name)
            .join("summary.json")
            .exists());
        // A second pass finds every run finished and re-reads the same summaries.
        let again = run_all(&runs, dir.path(), &out, 2, &|_, _| {}).expect("runs");
        assert_eq!(
            again.iter().map(|(_, s)| s.all.mean_s).collect::<Vec<_>>(),
            results
                .iter()
                .map(|(_, s)| s.all.mean_s)
                .collect::<Vec<_>>()
        );
        assert!(results_csv(&results).lines().count() == 7);
        // A changed base file is not resumed from the old results.
        std::fs::write(dir.path().join("base.toml"), "[workload]\ntransfers = 60\n")
            .expect("write");
        let runs = expand(&design).expect("valid design");
        let changed = run_all(&runs, dir.path(), &out, 2, &|_, _| {}).expect("runs");
        assert!(changed.iter().all(|(_, s)| s.completed == 60));
    }

    #[test]
    fn panels_merge_whole_overrides() {
        let dir = tempfile::tempdir().expect("tempdir");
        let design = dir.path().join("d.toml");
        std::fs::write(&design, "[factors]\n\".\" = [{ name = \"a\" }, { name = \"fast\", workload = { rate = 40, transfers = 10 } }]\n").expect("write");
        let runs = expand(&design).expect("valid design");
        assert_eq!(
            runs.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ["a", "fast"]
        );
        assert!(
            runs[1].scenario.contains("rate = 40"),
            "{}",
            runs[1].scenario
        );
    }

    #[test]
    fn a_bad_level_is_reported_before_anything_runs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let design = dir.path().join("d.toml");
        std::fs::write(&design, "[factors]\n\"workload.rate\" = [10, -1]\n").expect("write");
        let e = expand(&design).unwrap_err().to_string();
        assert!(e.contains("rate=-1") && e.contains("workload.rate"), "{e}");
    }
}
