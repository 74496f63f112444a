//! Figures as plain SVG: a line chart (normalized time vs MP level or processors,
//! one line per implementation, as the papers draw them) and a horizontal bar
//! chart. Written by hand so that no font or graphics library is needed.

use std::fmt::Write;

const W: f64 = 760.0;
const H: f64 = 440.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 55.0;
const COLORS: [&str; 12] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#637939",
];

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

fn fmt_tick(v: f64) -> String {
    if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
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

/// A line chart with a legend on the right.
pub fn line_chart(title: &str, xlabel: &str, ylabel: &str, series: &[Series]) -> String {
    let pts = series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|p| p.1.is_finite());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if x0 == x1 {
        (x0, x1) = (x0 - 0.5, x1 + 0.5);
    }
    let ys = step(y1.max(1e-9), 5.0);
    let y1 = (y1 / ys).ceil().max(1.0) * ys;
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * pw;
    let sy = |y: f64| TOP + ph - y / y1 * ph;
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(o, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = write!(
        o,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        esc(title)
    );
    // Grid and ticks.
    let mut y = 0.0;
    while y <= y1 + ys / 2.0 {
        let py = sy(y);
        let _ = write!(
            o,
            r##"<line x1="{LEFT}" y1="{py}" x2="{}" y2="{py}" stroke="#ddd"/>"##,
            LEFT + pw
        );
        let _ = write!(
            o,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            py + 4.0,
            fmt_axis(y, ys)
        );
        y += ys;
    }
    let xs = step(x1 - x0, 6.0);
    let mut x = (x0 / xs).ceil() * xs;
    while x <= x1 + xs * 1e-6 {
        let px = sx(x);
        let _ = write!(
            o,
            r##"<line x1="{px}" y1="{}" x2="{px}" y2="{}" stroke="#999"/>"##,
            TOP + ph,
            TOP + ph + 5.0
        );
        let _ = write!(
            o,
            r#"<text x="{px}" y="{}" text-anchor="middle">{}</text>"#,
            TOP + ph + 18.0,
            fmt_axis(x, xs)
        );
        x += xs;
    }
    let _ = write!(
        o,
        r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##
    );
    let _ = write!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        H - 12.0,
        esc(xlabel)
    );
    let _ = write!(
        o,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        esc(ylabel)
    );
    for (i, s) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let path: Vec<String> = s
            .points
            .iter()
            .filter(|p| p.1.is_finite())
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        if !path.is_empty() {
            let _ = write!(
                o,
                r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
                path.join(" ")
            );
        }
        for &(x, y) in s.points.iter().filter(|p| p.1.is_finite()) {
            let _ = write!(
                o,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{c}"/>"#,
                sx(x),
                sy(y)
            );
        }
        let ly = TOP + 10.0 + i as f64 * 18.0;
        let lx = LEFT + pw + 14.0;
        let _ = write!(
            o,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="3"/>"#,
            lx + 20.0
        );
        let _ = write!(
            o,
            r#"<text x="{}" y="{}">{}</text>"#,
            lx + 26.0,
            ly + 4.0,
            esc(&s.label)
        );
    }
    o.push_str("</svg>\n");
    o
}

/// A horizontal bar chart, one bar per (label, value).
pub fn bar_chart(title: &str, xlabel: &str, bars: &[(String, f64)]) -> String {
    let h = TOP + BOTTOM + 24.0 * bars.len().max(1) as f64;
    let left = 170.0;
    let pw = W - left - 80.0;
    let vmax = bars
        .iter()
        .map(|b| b.1)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .max(1e-9);
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(o, r#"<rect width="{W}" height="{h}" fill="white"/>"#);
    let _ = write!(
        o,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    for (i, (label, v)) in bars.iter().enumerate() {
        let y = TOP + i as f64 * 24.0;
        let w = if v.is_finite() { v / vmax * pw } else { 0.0 };
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
            fmt_tick(*v)
        );
    }
    let _ = write!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        h - 14.0,
        esc(xlabel)
    );
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_chart_has_every_series_and_escapes_text() {
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
        let svg = line_chart("t & u", "MP level", "time", &s);
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

    #[test]
    fn nice_steps() {
        assert_eq!(step(10.0, 5.0), 2.0);
        assert_eq!(step(1.0, 5.0), 0.2);
        assert_eq!(step(70.0, 5.0), 10.0);
    }
}
