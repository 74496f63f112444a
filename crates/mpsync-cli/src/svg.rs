//! Figures as plain SVG: line charts stacked as small multiples (normalized
//! time vs MP level or processors, one line per implementation, as the papers
//! draw them; lines told apart by colour, dash and marker; a legend as wide
//! and tall as its labels; a log y axis when the values span more than 10×)
//! and a horizontal bar chart. Written by hand so that no font or graphics
//! library is needed.

use std::fmt::Write;

const W: f64 = 760.0;
const H: f64 = 440.0;
const LEFT: f64 = 70.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 55.0;
/// Most lines one panel draws (the experiment model keeps to it).
pub const MAX_LINES: usize = 8;
/// Eight colours a reader tells apart (Okabe & Ito's palette, with its yellow
/// darkened to read on white).
const COLORS: [&str; 8] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#000000", "#e69f00", "#56b4e9", "#8c7a00",
];
/// Dash patterns: a line's colour and dash together are unique up to 32 lines.
const DASHES: [&str; 4] = ["", "7 3", "2 3", "9 3 2 3"];
/// Approximate width of one character of the 12 px sans-serif text.
const CHAR_W: f64 = 6.8;
/// Height of one legend row.
const LEGEND_ROW: f64 = 18.0;
/// A figure whose positive values span more than this factor gets a log axis.
const LOG_SPAN: f64 = 10.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// "Nice" tick step for a range.
fn step(span: f64, ticks: f64) -> f64 {
    let raw = (span / ticks).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    let n = raw / mag;
    mag * if n < 1.5 {
        1.0
    } else if n < 3.0 {
        2.0
    } else if n < 7.0 {
        5.0
    } else {
        10.0
    }
}

/// A value as a label: three significant digits (`12300`, `1.23`, `0.0123`).
pub fn sig3(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let mag = v.abs().log10().floor();
    if mag >= 3.0 {
        format!(
            "{:.0}",
            (v / 10f64.powf(mag - 2.0)).round() * 10f64.powf(mag - 2.0)
        )
    } else {
        let decimals = (2.0 - mag).clamp(0.0, 9.0) as usize;
        format!("{v:.decimals$}")
    }
}

/// An axis tick: as many decimals as the tick step needs, the same for every tick.
fn fmt_axis(v: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).clamp(0.0, 6.0) as usize;
    format!("{v:.decimals$}")
}

/// One line of a line chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// (x, y) points; NaN y values are skipped.
    pub points: Vec<(f64, f64)>,
}

/// The y axis: linear from 0, or logarithmic over the values' decades.
#[derive(Debug, Clone, Copy)]
enum YAxis {
    Linear { top: f64, step: f64 },
    Log { lo: f64, hi: f64 },
}

impl YAxis {
    /// The axis for these values: log when the positive ones span more than
    /// [`LOG_SPAN`].
    fn fit(values: impl Iterator<Item = f64>) -> Self {
        let (mut lo, mut hi) = (f64::MAX, 0.0f64);
        for v in values.filter(|v| v.is_finite()) {
            hi = hi.max(v);
            if v > 0.0 {
                lo = lo.min(v);
            }
        }
        if hi > 0.0 && lo < f64::MAX && hi / lo > LOG_SPAN {
            return Self::Log {
                lo: 10f64.powf(lo.log10().floor()),
                hi: 10f64.powf(hi.log10().ceil()),
            };
        }
        let step = step(hi.max(1e-9), 5.0);
        Self::Linear {
            top: (hi / step).ceil().max(1.0) * step,
            step,
        }
    }

    /// Where `v` falls, 0 (bottom) to 1 (top); None for a value a log axis cannot show.
    fn frac(self, v: f64) -> Option<f64> {
        match self {
            Self::Linear { top, .. } => v.is_finite().then(|| v / top),
            Self::Log { lo, hi } => {
                (v.is_finite() && v > 0.0).then(|| (v / lo).log10() / (hi / lo).log10())
            }
        }
    }

    /// Tick values and their labels.
    fn ticks(self) -> Vec<(f64, String)> {
        match self {
            Self::Linear { top, step } => {
                let mut t = Vec::new();
                let mut y = 0.0;
                while y <= top + step / 2.0 {
                    t.push((y, fmt_axis(y, step)));
                    y += step;
                }
                t
            }
            Self::Log { lo, hi } => {
                let decades = (hi / lo).log10().round() as i32;
                let mults: &[f64] = if decades <= 2 {
                    &[1.0, 2.0, 5.0]
                } else {
                    &[1.0]
                };
                let mut t = Vec::new();
                for d in 0..=decades {
                    for m in mults {
                        let v = lo * 10f64.powi(d) * m;
                        if v <= hi * 1.0001 {
                            t.push((v, sig3(v)));
                        }
                    }
                }
                t
            }
        }
    }

    fn is_log(self) -> bool {
        matches!(self, Self::Log { .. })
    }
}

/// Colour, dash and marker of line `i`.
fn style(i: usize) -> (&'static str, &'static str, usize) {
    (
        COLORS[i % COLORS.len()],
        DASHES[(i / COLORS.len()) % DASHES.len()],
        i % 4,
    )
}

/// A marker of kind `k` (circle, square, triangle, diamond) at (x, y).
fn marker(o: &mut String, k: usize, x: f64, y: f64, c: &str) {
    let _ = match k {
        0 => write!(o, r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{c}"/>"#),
        1 => write!(
            o,
            r#"<rect x="{:.1}" y="{:.1}" width="7" height="7" fill="{c}"/>"#,
            x - 3.5,
            y - 3.5
        ),
        2 => write!(
            o,
            r#"<polygon points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{c}"/>"#,
            x,
            y - 4.5,
            x - 4.0,
            y + 3.0,
            x + 4.0,
            y + 3.0
        ),
        _ => write!(
            o,
            r#"<polygon points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{c}"/>"#,
            x,
            y - 4.5,
            x + 4.5,
            y,
            x,
            y + 4.5,
            x - 4.5,
            y
        ),
    };
}

/// The distinct x values of `series`, sorted.
fn distinct_xs(series: &[Series]) -> Vec<f64> {
    let mut xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|p| p.1.is_finite())
        .map(|p| p.0)
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    xs
}

/// Several line charts stacked in one SVG document, sharing their axes'
/// ranges so that panels compare: one per `(title, lines)`.
pub fn small_multiples(panels: &[(String, Vec<Series>)], xlabel: &str, ylabel: &str) -> String {
    let all: Vec<Series> = panels.iter().flat_map(|p| p.1.iter().cloned()).collect();
    let y = YAxis::fit(all.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
    let xs = distinct_xs(&all);
    let (x0, x1) = match (xs.first(), xs.last()) {
        (Some(&a), Some(&b)) if a < b => (a, b),
        (Some(&a), _) => (a - 0.5, a + 0.5),
        _ => (0.0, 1.0),
    };
    let longest = all
        .iter()
        .map(|s| s.label.chars().count())
        .max()
        .unwrap_or(0);
    let legend_w = 40.0 + longest as f64 * CHAR_W;
    let width = W.max(LEFT + 420.0 + legend_w);
    let rows = panels.iter().map(|p| p.1.len()).max().unwrap_or(0);
    let panel_h = H.max(TOP + 10.0 + rows as f64 * LEGEND_ROW + BOTTOM);
    let total_h = panel_h * panels.len().max(1) as f64;
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total_h}" viewBox="0 0 {width} {total_h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(
        o,
        r#"<rect width="{width}" height="{total_h}" fill="white"/>"#
    );
    let mut first = 0;
    for (k, (title, lines)) in panels.iter().enumerate() {
        let top = k as f64 * panel_h;
        panel(
            &mut o,
            PanelGeom {
                top,
                pw: width - LEFT - legend_w,
                ph: panel_h - TOP - BOTTOM,
                x0,
                x1,
                y,
            },
            title,
            xlabel,
            ylabel,
            lines,
            first,
        );
        first += lines.len();
    }
    o.push_str("</svg>\n");
    o
}

#[derive(Debug, Clone, Copy)]
struct PanelGeom {
    top: f64,
    pw: f64,
    ph: f64,
    x0: f64,
    x1: f64,
    y: YAxis,
}

fn panel(
    o: &mut String,
    g: PanelGeom,
    title: &str,
    xlabel: &str,
    ylabel: &str,
    lines: &[Series],
    first: usize,
) {
    let PanelGeom { top, pw, ph, y, .. } = g;
    let _ = write!(
        o,
        r#"<text x="{}" y="{}" font-size="15" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        top + 22.0,
        esc(title)
    );
    ticks(o, g);
    let _ = write!(
        o,
        r##"<rect x="{LEFT}" y="{}" width="{pw:.1}" height="{ph:.1}" fill="none" stroke="#333"/>"##,
        top + TOP
    );
    let _ = write!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        top + TOP + ph + 42.0,
        esc(xlabel)
    );
    let ylabel = if y.is_log() {
        format!("{ylabel} (log scale)")
    } else {
        ylabel.to_string()
    };
    let cy = top + TOP + ph / 2.0;
    let _ = write!(
        o,
        r#"<text x="16" y="{cy:.1}" text-anchor="middle" transform="rotate(-90 16 {cy:.1})">{}</text>"#,
        esc(&ylabel)
    );
    draw_lines(o, g, lines, first);
}

/// The grid lines and tick labels of one panel's axes.
fn ticks(o: &mut String, g: PanelGeom) {
    let PanelGeom {
        top,
        pw,
        ph,
        x0,
        x1,
        y,
    } = g;
    let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * pw;
    let sy = |v: f64| y.frac(v).map(|f| top + TOP + ph - f.clamp(0.0, 1.0) * ph);
    for (v, label) in y.ticks() {
        let Some(py) = sy(v) else { continue };
        let _ = write!(
            o,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/>"##,
            LEFT + pw
        );
        let _ = write!(
            o,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            py + 4.0,
            label
        );
    }
    let xs = step(x1 - x0, 6.0);
    let mut x = (x0 / xs).ceil() * xs;
    while x <= x1 + xs * 1e-6 {
        let px = sx(x);
        let _ = write!(
            o,
            r##"<line x1="{px:.1}" y1="{}" x2="{px:.1}" y2="{}" stroke="#999"/>"##,
            top + TOP + ph,
            top + TOP + ph + 5.0
        );
        let _ = write!(
            o,
            r#"<text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"#,
            top + TOP + ph + 18.0,
            fmt_axis(x, xs)
        );
        x += xs;
    }
}

/// The lines of one panel and their legend on its right.
fn draw_lines(o: &mut String, g: PanelGeom, lines: &[Series], first: usize) {
    let PanelGeom {
        top,
        pw,
        ph,
        x0,
        x1,
        y,
    } = g;
    let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * pw;
    let sy = |v: f64| y.frac(v).map(|f| top + TOP + ph - f.clamp(0.0, 1.0) * ph);
    for (i, s) in lines.iter().enumerate() {
        let (c, dash, m) = style(first + i);
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter_map(|&(x, v)| sy(v).map(|py| (sx(x), py)))
            .collect();
        if !pts.is_empty() {
            let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
            let _ = write!(
                o,
                r#"<polyline fill="none" stroke="{c}" stroke-width="2" stroke-dasharray="{dash}" points="{}"/>"#,
                path.join(" ")
            );
        }
        for &(px, py) in &pts {
            marker(o, m, px, py, c);
        }
        let ly = top + TOP + 10.0 + i as f64 * LEGEND_ROW;
        let lx = LEFT + pw + 12.0;
        let _ = write!(
            o,
            r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{c}" stroke-width="2.5" stroke-dasharray="{dash}"/>"#,
            lx + 22.0
        );
        marker(o, m, lx + 11.0, ly, c);
        let _ = write!(
            o,
            r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 28.0,
            ly + 4.0,
            esc(&s.label)
        );
    }
}

/// A horizontal bar chart, one bar per (label, value); a log axis when the
/// values span more than 10×, so that small bars stay visible.
pub fn bar_chart(title: &str, xlabel: &str, bars: &[(String, f64)]) -> String {
    let h = TOP + BOTTOM + 24.0 * bars.len().max(1) as f64;
    let longest = bars.iter().map(|b| b.0.chars().count()).max().unwrap_or(0);
    let left = (20.0 + longest as f64 * CHAR_W).max(120.0);
    let width = W.max(left + 420.0);
    let pw = width - left - 80.0;
    let axis = YAxis::fit(bars.iter().map(|b| b.1));
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" viewBox="0 0 {width} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(o, r#"<rect width="{width}" height="{h}" fill="white"/>"#);
    let _ = write!(
        o,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        width / 2.0,
        esc(title)
    );
    for (i, (label, v)) in bars.iter().enumerate() {
        let y = TOP + i as f64 * 24.0;
        let w = axis.frac(*v).map_or(0.0, |f| f.clamp(0.0, 1.0) * pw);
        let c = COLORS[i % COLORS.len()];
        let _ = write!(
            o,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            left - 8.0,
            y + 15.0,
            esc(label)
        );
        let _ = write!(
            o,
            r#"<rect x="{left}" y="{y}" width="{w:.1}" height="18" fill="{c}"/>"#
        );
        let _ = write!(
            o,
            r#"<text x="{:.1}" y="{}">{}</text>"#,
            left + w + 6.0,
            y + 14.0,
            sig3(*v)
        );
    }
    let xlabel = if axis.is_log() {
        format!("{xlabel} (log scale)")
    } else {
        xlabel.to_string()
    };
    let _ = write!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        h - 14.0,
        esc(&xlabel)
    );
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_has_every_series_and_escapes_text() {
        let s = vec![
            Series {
                label: "TAS-B".into(),
                points: vec![(1.0, 1.0), (2.0, 2.5)],
            },
            Series {
                label: "a<b".into(),
                points: vec![(1.0, f64::NAN), (2.0, 1.0)],
            },
        ];
        let svg = small_multiples(&[("t & u".into(), s)], "MP level", "time");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("TAS-B") && svg.contains("a&lt;b") && svg.contains("t &amp; u"));
        assert_eq!(svg.matches("<polyline").count(), 2);
    }

    #[test]
    fn bar_chart_draws_bars() {
        let svg = bar_chart("latency", "ns", &[("x".into(), 3.0), ("y".into(), 6.0)]);
        assert_eq!(svg.matches("<rect").count(), 3);
    }

    #[test]
    fn axis_ticks_share_their_decimals() {
        assert_eq!(
            [0.0, 0.5, 1.0, 1.5].map(|v| fmt_axis(v, 0.5)),
            ["0.0", "0.5", "1.0", "1.5"]
        );
        assert_eq!(fmt_axis(2.0, 1.0), "2");
        assert_eq!(fmt_axis(0.25, 0.05), "0.25");
    }

    fn lines(n: usize, ys: impl Fn(usize) -> [f64; 2]) -> Vec<Series> {
        (0..n)
            .map(|i| Series {
                label: format!("lock number {i}"),
                points: vec![(1.0, ys(i)[0]), (2.0, ys(i)[1])],
            })
            .collect()
    }

    #[test]
    fn panels_style_every_line_apart_and_fit_their_legends() {
        let all = lines(23, |i| [1.0, i as f64]);
        let panels: Vec<(String, Vec<Series>)> = all
            .chunks(MAX_LINES)
            .enumerate()
            .map(|(i, c)| (format!("many ({} of 3)", i + 1), c.to_vec()))
            .collect();
        let svg = small_multiples(&panels, "threads", "ops/s");
        assert_eq!(svg.matches("<polyline").count(), 23);
        assert_eq!(svg.matches("(1 of 3)").count(), 1, "{svg}");
        assert!(svg.contains("(3 of 3)"));
        let styles: std::collections::HashSet<_> = (0..23).map(style).map(|s| (s.0, s.1)).collect();
        assert_eq!(styles.len(), 23, "colour and dash pairs repeat");
        // Every legend row of a panel fits inside the document.
        let height: f64 = svg
            .split("height=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        let last_row: f64 = svg
            .rsplit("<text x=\"")
            .filter_map(|t| {
                t.split("y=\"")
                    .nth(1)?
                    .split('"')
                    .next()?
                    .parse::<f64>()
                    .ok()
            })
            .fold(0.0, f64::max);
        assert!(
            last_row < height,
            "text at y {last_row} beyond the height {height}"
        );
    }

    #[test]
    fn a_wide_range_gets_a_log_axis_and_a_narrow_one_does_not() {
        let chart = |ys: &dyn Fn(usize) -> [f64; 2]| {
            small_multiples(&[("w".into(), lines(2, ys))], "x", "y")
        };
        let wide = chart(&|i| [1.0, 480.0 * (i + 1) as f64]);
        assert!(wide.contains("(log scale)"));
        let narrow = chart(&|i| [1.0, 2.0 + i as f64]);
        assert!(!narrow.contains("(log scale)"));
    }

    #[test]
    fn three_significant_digits() {
        assert_eq!(sig3(325240.0), "325000");
        assert_eq!(sig3(1.23456), "1.23");
        assert_eq!(sig3(0.012345), "0.0123");
        assert_eq!(sig3(12.0), "12.0");
        assert_eq!(sig3(0.0), "0");
        assert_eq!(sig3(f64::NAN), "–");
    }

    #[test]
    fn nice_steps() {
        assert_eq!(step(10.0, 5.0), 2.0);
        assert_eq!(step(1.0, 5.0), 0.2);
        assert_eq!(step(70.0, 5.0), 10.0);
    }
}
