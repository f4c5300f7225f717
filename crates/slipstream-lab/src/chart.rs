//! Small SVG charts of benchmark results: line charts (e.g. hit ratio against
//! cache size, latency against load) and bar charts (e.g. throughput per system).
//!
//! Charts are rendered in memory and written in one go, so a failed write names
//! the file and never leaves a half-drawn chart behind.

use std::ops::Range;
use std::path::Path;

use plotters::coord::ranged1d::{SegmentValue, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::drawing::DrawingAreaErrorKind;
use plotters::prelude::*;

/// A chart that cannot be drawn or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The data cannot be drawn: no bars, non-finite numbers, or non-positive values on a
    /// logarithmic axis.
    #[error("chart `{title}`: {message}")]
    Data {
        /// The chart's title.
        title: String,
        /// What is wrong with the data.
        message: &'static str,
    },
    /// plotters failed while rendering the SVG in memory.
    #[error("drawing a chart failed")]
    Draw(#[from] DrawingAreaErrorKind<std::io::Error>),
    /// Writing the SVG file failed.
    #[error("writing chart {path}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn data_error(title: &str, message: &'static str) -> Error {
    Error::Data {
        title: title.to_owned(),
        message,
    }
}

/// Writes the rendered SVG in one go.
fn write(path: &Path, svg: String) -> Result<(), Error> {
    std::fs::write(path, svg).map_err(|source| Error::Write {
        path: path.display().to_string(),
        source,
    })
}

/// Width and height of every chart, in SVG pixels.
const SIZE: (u32, u32) = (800, 500);

/// One named line of a [`line_chart`].
#[derive(Debug, Clone)]
pub struct Series {
    /// Shown in the legend.
    pub name: String,
    /// `(x, y)` points, drawn in the given order and marked with a dot each.
    pub points: Vec<(f64, f64)>,
}

/// Title and axes of a [`line_chart`].
#[derive(Debug, Clone)]
pub struct Axes {
    /// Caption above the plot.
    pub title: String,
    /// Description of the x axis.
    pub x_label: String,
    /// Description of the y axis.
    pub y_label: String,
    /// Logarithmic x axis (all x values must then be positive).
    pub log_x: bool,
}

/// Writes an 800×500 SVG line chart of `series` with a legend and a marker on
/// every point. Non-finite points are an error, as are non-positive x values on
/// a logarithmic axis.
pub fn line_chart(path: &Path, axes: &Axes, series: &[Series]) -> Result<(), Error> {
    let points = || series.iter().flat_map(|s| s.points.iter().copied());
    if points().any(|(x, y)| !x.is_finite() || !y.is_finite()) {
        return Err(data_error(&axes.title, "points must be finite numbers"));
    }
    if axes.log_x && points().any(|(x, _)| x <= 0.0) {
        return Err(data_error(
            &axes.title,
            "a logarithmic x axis needs positive x values",
        ));
    }
    let x_range = padded(points().map(|p| p.0), axes.log_x);
    let mut y_range = padded(points().map(|p| p.1), false);
    // Headroom for the legend in the upper right, about one text line per series.
    y_range.end += (y_range.end - y_range.start) * 0.06 * series.len() as f64;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(&axes.title, ("sans-serif", 22))
            .margin(20)
            .x_label_area_size(45)
            .y_label_area_size(70);
        if axes.log_x {
            let chart = builder.build_cartesian_2d(x_range.log_scale(), y_range)?;
            draw_lines(chart, axes, series)?;
        } else {
            let chart = builder.build_cartesian_2d(x_range, y_range)?;
            draw_lines(chart, axes, series)?;
        }
        root.present()?;
    }
    write(path, svg)
}

fn draw_lines<'a, X>(
    mut chart: ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, RangedCoordf64>>,
    axes: &Axes,
    series: &'a [Series],
) -> Result<(), Error>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc(axes.x_label.as_str())
        .y_desc(axes.y_label.as_str())
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(s.name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Writes an 800×500 SVG bar chart, one labelled bar per `(name, value)`.
pub fn bar_chart(
    path: &Path,
    title: &str,
    y_label: &str,
    bars: &[(String, f64)],
) -> Result<(), Error> {
    if bars.is_empty() {
        return Err(data_error(title, "no bars to draw"));
    }
    if bars.iter().any(|(_, v)| !v.is_finite()) {
        return Err(data_error(title, "bar values must be finite numbers"));
    }
    let low = bars.iter().map(|b| b.1).fold(0.0, f64::min);
    let high = bars.iter().map(|b| b.1).fold(0.0, f64::max);
    let y_range = if high > low {
        low * 1.1..high * 1.1
    } else {
        0.0..1.0
    };

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(20)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d((0..bars.len() - 1).into_segmented(), y_range)?;
        let name_of = |v: &SegmentValue<usize>| match v {
            SegmentValue::CenterOf(i) => bars.get(*i).map(|b| b.0.clone()).unwrap_or_default(),
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(bars.len())
            .x_label_formatter(&name_of)
            .y_label_formatter(&|v| short_number(*v))
            .y_desc(y_label)
            .draw()?;
        chart.draw_series(bars.iter().enumerate().map(|(i, (_, value))| {
            let color = Palette99::pick(i).to_rgba().filled();
            // The last segment ends at the right edge (`Last`): `Exact(n)` is past
            // the axis, which for a single bar is degenerate.
            let right = if i + 1 == bars.len() {
                SegmentValue::Last
            } else {
                SegmentValue::Exact(i + 1)
            };
            let mut bar = Rectangle::new([(SegmentValue::Exact(i), 0.0), (right, *value)], color);
            bar.set_margin(0, 0, 12, 12);
            bar
        }))?;
        // Each value sits just above (or below, if negative) the end of its bar.
        chart.draw_series(bars.iter().enumerate().map(|(i, (_, value))| {
            let text = short_number(*value);
            let dx = -(text.len() as i32) * 7 / 2;
            let dy = if *value < 0.0 { 4 } else { -18 };
            EmptyElement::at((SegmentValue::CenterOf(i), *value))
                + Text::new(text, (dx, dy), ("sans-serif", 14))
        }))?;
        root.present()?;
    }
    write(path, svg)
}

/// A number with as many decimals as its magnitude warrants.
fn short_number(v: f64) -> String {
    match v.abs() {
        a if a >= 100.0 || a == 0.0 => format!("{v:.0}"),
        a if a >= 1.0 => format!("{v:.1}"),
        _ => format!("{v:.3}"),
    }
}

/// The range of `values` widened by 5% on each side (multiplicatively for a log
/// axis), or a unit range around a single value or an empty set.
fn padded(values: impl Iterator<Item = f64>, log: bool) -> Range<f64> {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    match (lo.is_finite(), log) {
        (false, false) => 0.0..1.0,
        (false, true) => 1.0..10.0,
        (true, true) if hi > lo => lo / 1.2..hi * 1.2,
        (true, true) => lo / 2.0..lo * 2.0,
        (true, false) if hi > lo => {
            let pad = (hi - lo) * 0.05;
            lo - pad..hi + pad
        }
        (true, false) => lo - 1.0..lo + 1.0,
    }
}

/// A log-log scatter plot: one colour of small circles per series (paper 003's Figure 2:
/// transfer latency against transfer size in packets, by source). Every coordinate must be
/// positive.
pub fn scatter_loglog(path: &Path, axes: &Axes, series: &[Series]) -> Result<(), Error> {
    let points = || series.iter().flat_map(|s| s.points.iter().copied());
    if points().any(|(x, y)| !(x.is_finite() && y.is_finite() && x > 0.0 && y > 0.0)) {
        return Err(data_error(
            &axes.title,
            "a log-log scatter needs positive, finite points",
        ));
    }
    let x_range = padded(points().map(|p| p.0), true);
    let mut y_range = padded(points().map(|p| p.1), true);
    y_range.end *= 1.0 + 0.5 * series.len() as f64;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&axes.title, ("sans-serif", 22))
            .margin(20)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(x_range.log_scale(), y_range.log_scale())?;
        chart
            .configure_mesh()
            .x_desc(axes.x_label.as_str())
            .y_desc(axes.y_label.as_str())
            .draw()?;
        for (i, s) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(
                    s.points
                        .iter()
                        .map(|&(x, y)| Circle::new((x, y), 2, color.filled())),
                )?
                .label(s.name.as_str())
                .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.9))
            .draw()?;
        root.present()?;
    }
    write(path, svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axes(log_x: bool) -> Axes {
        Axes {
            title: "Hit ratio".into(),
            x_label: "cache size (MB)".into(),
            y_label: "hit ratio".into(),
            log_x,
        }
    }

    #[test]
    fn line_chart_writes_svg_with_legend() {
        let dir = tempfile::tempdir().unwrap();
        let series = [
            Series {
                name: "lru-series".into(),
                points: vec![(1.0, 0.2), (10.0, 0.5), (100.0, 0.7)],
            },
            Series {
                name: "gdsf-series".into(),
                points: vec![(1.0, 0.3), (10.0, 0.6), (100.0, 0.8)],
            },
        ];
        for log_x in [false, true] {
            let path = dir.path().join(format!("line-{log_x}.svg"));
            line_chart(&path, &axes(log_x), &series).unwrap();
            let svg = std::fs::read_to_string(&path).unwrap();
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
            assert!(svg.contains("width=\"800\"") && svg.contains("height=\"500\""));
            assert!(svg.contains("lru-series") && svg.contains("gdsf-series"));
            assert!(svg.contains("<circle"), "markers on points");
        }
    }

    #[test]
    fn line_chart_rejects_bad_points() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.svg");
        let zero_x = [Series {
            name: "s".into(),
            points: vec![(0.0, 1.0)],
        }];
        assert!(line_chart(&path, &axes(true), &zero_x).is_err());
        let nan = [Series {
            name: "s".into(),
            points: vec![(1.0, f64::NAN)],
        }];
        assert!(line_chart(&path, &axes(false), &nan).is_err());
        assert!(!path.exists());
    }

    #[test]
    fn bar_chart_writes_svg_with_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bars.svg");
        let bars = [
            ("slipstream".to_owned(), 12000.0),
            ("nginx".to_owned(), 15000.0),
        ];
        bar_chart(&path, "Throughput", "req/s", &bars).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("slipstream") && svg.contains("nginx"));
        assert!(svg.contains("<rect") && svg.contains("12000"));
        assert!(bar_chart(&path, "Empty", "req/s", &[]).is_err());
    }

    #[test]
    fn padded_ranges() {
        assert_eq!(padded([2.0, 2.0].into_iter(), false), 1.0..3.0);
        assert_eq!(padded(std::iter::empty(), true), 1.0..10.0);
        let r = padded([0.0, 10.0].into_iter(), false);
        assert_eq!(r, -0.5..10.5);
    }
}
