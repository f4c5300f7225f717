//! `slipstream sim compare`: two runs of the same transfers (for example `slipstream sim` and
//! ns-2 running the `--export-ns2` script) side by side: how many transfers finished at the
//! same time, and per source the mean latencies and the two-sample Kolmogorov–Smirnov distance
//! between the latency distributions, against its 5 % critical value.

use std::collections::BTreeMap;

/// One row of `transfers.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Transfer id.
    pub id: u64,
    /// Serving level.
    pub source: String,
    /// Latency in seconds.
    pub latency_s: f64,
}

/// A malformed `transfers.csv`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{file}:{line}: {message}")]
pub struct CsvError {
    /// File name.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Reads `transfers.csv` (the columns `id`, `source` and `latency_s`, wherever they are).
pub fn parse(text: &str, file: &str) -> Result<Vec<Row>, CsvError> {
    let err = |line: usize, message: String| CsvError {
        file: file.to_owned(),
        line,
        message,
    };
    let mut lines = text.lines().enumerate();
    let header: Vec<&str> = lines
        .next()
        .ok_or_else(|| err(1, "empty file: expected a header line".into()))?
        .1
        .split(',')
        .collect();
    let column = |name: &str| {
        header
            .iter()
            .position(|h| h.trim() == name)
            .ok_or_else(|| err(1, format!("no `{name}` column in the header")))
    };
    let (id, source, latency) = (column("id")?, column("source")?, column("latency_s")?);
    let mut rows = Vec::new();
    for (i, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        let field = |c: usize| {
            f.get(c).copied().ok_or_else(|| {
                err(
                    i + 1,
                    format!("{} fields, expected {}", f.len(), header.len()),
                )
            })
        };
        let latency_s: f64 = field(latency)?
            .parse()
            .map_err(|_| err(i + 1, format!("latency `{}` is not a number", f[latency])))?;
        rows.push(Row {
            id: field(id)?
                .parse()
                .map_err(|_| err(i + 1, format!("id `{}` is not a whole number", f[id])))?,
            source: field(source)?.to_owned(),
            latency_s,
        });
    }
    Ok(rows)
}

/// Two-sample Kolmogorov–Smirnov distance.
pub fn ks_distance(a: &[f64], b: &[f64]) -> f64 {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    let (mut i, mut j, mut d) = (0, 0, 0.0f64);
    while i < a.len() && j < b.len() {
        let v = a[i].min(b[j]);
        while i < a.len() && a[i] <= v {
            i += 1;
        }
        while j < b.len() && b[j] <= v {
            j += 1;
        }
        d = d.max((i as f64 / a.len() as f64 - j as f64 / b.len() as f64).abs());
    }
    d
}

/// The KS distance above which two samples of sizes `n` and `m` differ at the 5 % level.
pub fn ks_critical_5pc(n: usize, m: usize) -> f64 {
    let (n, m) = (n.max(1) as f64, m.max(1) as f64);
    1.358 * ((n + m) / (n * m)).sqrt()
}

/// One source's comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Source name (`all` for every transfer).
    pub source: String,
    /// Transfers in each run.
    pub n: (usize, usize),
    /// Mean latencies.
    pub mean_s: (f64, f64),
    /// KS distance between the latency distributions.
    pub ks: f64,
    /// Its 5 % critical value.
    pub ks_critical: f64,
}

/// Two runs compared.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Transfers present in both.
    pub common: usize,
    /// Of those, finished within `tolerance_s` of each other.
    pub identical: usize,
    /// The tolerance used.
    pub tolerance_s: f64,
    /// The largest latency difference, seconds.
    pub largest_difference_s: f64,
    /// Per source, then `all`.
    pub groups: Vec<Group>,
}

/// Compares run `a` with run `b`.
pub fn compare(a: &[Row], b: &[Row], tolerance_s: f64) -> Comparison {
    let by_id: BTreeMap<u64, f64> = b.iter().map(|r| (r.id, r.latency_s)).collect();
    let (mut common, mut identical, mut largest) = (0, 0, 0.0f64);
    for r in a {
        if let Some(other) = by_id.get(&r.id) {
            let d = (r.latency_s - other).abs();
            common += 1;
            identical += usize::from(d <= tolerance_s);
            largest = largest.max(d);
        }
    }
    let mut sources: Vec<&str> = a.iter().chain(b).map(|r| r.source.as_str()).collect();
    sources.sort_unstable();
    sources.dedup();
    sources.push("all");
    let pick = |rows: &[Row], s: &str| -> Vec<f64> {
        rows.iter()
            .filter(|r| s == "all" || r.source == s)
            .map(|r| r.latency_s)
            .collect()
    };
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let groups = sources
        .into_iter()
        .map(|s| {
            let (x, y) = (pick(a, s), pick(b, s));
            Group {
                source: s.to_owned(),
                n: (x.len(), y.len()),
                mean_s: (mean(&x), mean(&y)),
                ks: ks_distance(&x, &y),
                ks_critical: ks_critical_5pc(x.len(), y.len()),
            }
        })
        .collect();
    Comparison {
        common,
        identical,
        tolerance_s,
        largest_difference_s: largest,
        groups,
    }
}

impl std::fmt::Display for Comparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} transfers in both; {} finish within {:.0} µs of each other; largest difference {:.3} ms",
            self.common,
            self.identical,
            self.tolerance_s * 1e6,
            self.largest_difference_s * 1e3
        )?;
        writeln!(
            f,
            "{:<8} {:>6} {:>6} {:>10} {:>10} {:>8} {:>8} {:>9}",
            "source", "n A", "n B", "mean A s", "mean B s", "B vs A", "KS D", "KS 5 %"
        )?;
        for g in &self.groups {
            writeln!(
                f,
                "{:<8} {:>6} {:>6} {:>10.4} {:>10.4} {:>+7.1}% {:>8.4} {:>9.4}{}",
                g.source,
                g.n.0,
                g.n.1,
                g.mean_s.0,
                g.mean_s.1,
                100.0 * (g.mean_s.1 / g.mean_s.0 - 1.0),
                g.ks,
                g.ks_critical,
                if g.ks > g.ks_critical { "  differ" } else { "" }
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ks_distance_of_known_samples() {
        assert_eq!(ks_distance(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]), 0.0);
        assert_eq!(ks_distance(&[1.0, 2.0], &[3.0, 4.0]), 1.0);
        // Up to 2: half of a and none of b.
        assert!((ks_distance(&[1.0, 2.0, 3.0, 4.0], &[3.0, 5.0]) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn reads_transfers_csv_and_reports_bad_rows() {
        let text = "id,source,size_bytes,start_s,end_s,latency_s\n1,child,10,0,0.5,0.5\n2,origin,10,0,1,1.0\n";
        let rows = parse(text, "a.csv").expect("valid");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].source, "origin");
        let e = parse("id,source,latency_s\n1,child,fast\n", "a.csv").unwrap_err();
        assert_eq!(e.to_string(), "a.csv:2: latency `fast` is not a number");
        assert!(parse("id,latency_s\n", "a.csv")
            .unwrap_err()
            .to_string()
            .contains("no `source` column"));
    }

    #[test]
    fn compares_transfer_by_transfer_and_by_source() {
        let row = |id, source: &str, latency_s| Row {
            id,
            source: source.into(),
            latency_s,
        };
        let a = [row(1, "child", 0.010), row(2, "origin", 0.200)];
        let b = [row(1, "child", 0.010), row(2, "origin", 0.250)];
        let c = compare(&a, &b, 2e-6);
        assert_eq!((c.common, c.identical), (2, 1));
        assert!((c.largest_difference_s - 0.05).abs() < 1e-12);
        let origin = c
            .groups
            .iter()
            .find(|g| g.source == "origin")
            .expect("origin");
        assert_eq!(origin.ks, 1.0);
        assert_eq!(c.groups.last().expect("all").source, "all");
    }
}
