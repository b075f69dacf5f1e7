//! Plain SVG charts written as text: a line chart (scaling per engine count, RSS over time) and
//! a grouped bar chart with an optional log scale (latency percentiles per system).
//!
//! Output is a standalone SVG 1.1 document (`xmlns="http://www.w3.org/2000/svg"`) of fixed
//! size [`WIDTH`]×[`HEIGHT`]; text is XML-escaped. Non-finite or negative values are drawn as 0
//! (and as the axis floor on a log scale), so bad data yields a wrong-looking chart, never
//! invalid XML.

use std::fmt::Write as _;

pub const WIDTH: f64 = 720.0;
pub const HEIGHT: f64 = 360.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 180.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
/// Series colours (Okabe–Ito, readable by colour-blind readers).
const COLOURS: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
];

/// Escapes text for XML content and attribute values.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn clean(v: f64) -> f64 {
    if v.is_finite() && v > 0.0 { v } else { 0.0 }
}

/// A short label for an axis value: 1.2M, 350k, 12, 0.5.
pub fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else if a > 0.0 && a < 1.0 {
        // 0.01, 0.25: up to 3 decimals, trailing zeros dropped.
        let s = format!("{v:.3}");
        s.trim_end_matches('0').to_string()
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

/// "Nice" upper bound and tick step for a linear axis from 0 to `max`.
fn nice_axis(max: f64) -> (f64, f64) {
    let max = if max > 0.0 { max } else { 1.0 };
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    ((max / step).ceil() * step, step)
}

fn header(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
        WIDTH / 2.0,
        esc(title)
    );
}

fn legend(out: &mut String, names: &[String]) {
    for (i, name) in names.iter().enumerate() {
        let y = TOP + 10.0 + i as f64 * 18.0;
        let x = WIDTH - RIGHT + 15.0;
        let _ = writeln!(
            out,
            "<rect x=\"{x}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            y - 10.0,
            COLOURS[i % COLOURS.len()],
            x + 18.0,
            y,
            esc(name)
        );
    }
}

fn axis_labels(out: &mut String, x_label: &str, y_label: &str) {
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n\
         <text x=\"16\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {})\">{}</text>",
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        HEIGHT - 10.0,
        esc(x_label),
        TOP + (HEIGHT - TOP - BOTTOM) / 2.0,
        TOP + (HEIGHT - TOP - BOTTOM) / 2.0,
        esc(y_label)
    );
}

/// A line chart: each series is a list of (x, y) points; both axes linear from 0.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    let mut out = String::new();
    header(&mut out, title);
    let xmax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| clean(p.0)))
        .fold(0.0, f64::max);
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| clean(p.1)))
        .fold(0.0, f64::max);
    let (xtop, xstep) = nice_axis(xmax);
    let (ytop, ystep) = nice_axis(ymax);
    let (w, h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let px = |x: f64| LEFT + clean(x) / xtop * w;
    let py = |y: f64| TOP + h - clean(y) / ytop * h;
    let mut t = 0.0;
    while t <= ytop + ystep / 2.0 {
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            LEFT + w,
            LEFT - 6.0,
            py(t) + 4.0,
            short(t),
            y = py(t)
        );
        t += ystep;
    }
    let mut t = 0.0;
    while t <= xtop + xstep / 2.0 {
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            px(t),
            TOP + h + 18.0,
            short(t)
        );
        t += xstep;
    }
    let _ = writeln!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/><line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{}\" stroke=\"black\"/>",
        TOP + h,
        LEFT + w,
        TOP + h,
        TOP + h
    );
    for (i, (_, pts)) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = writeln!(
            out,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>",
            path.join(" ")
        );
        for &(x, y) in pts {
            let _ = writeln!(
                out,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\"/>",
                px(x),
                py(y)
            );
        }
    }
    axis_labels(&mut out, x_label, y_label);
    let names: Vec<String> = series.iter().map(|s| s.0.clone()).collect();
    legend(&mut out, &names);
    out.push_str("</svg>\n");
    out
}

/// A grouped bar chart: one group per entry of `groups`, one bar per series in each group.
/// With `log`, the y axis is logarithmic (decades from the smallest positive value).
pub fn bar_chart(
    title: &str,
    y_label: &str,
    groups: &[String],
    series: &[(String, Vec<f64>)],
    log: bool,
) -> String {
    let mut out = String::new();
    header(&mut out, title);
    let (w, h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let values = series.iter().flat_map(|s| s.1.iter().copied().map(clean));
    let ymax = values.clone().fold(0.0, f64::max);
    let ymin_pos = values.filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
    // Axis mapping and ticks.
    let (lo, hi, ticks): (f64, f64, Vec<f64>) = if log {
        let lo = if ymin_pos.is_finite() {
            10f64.powf(ymin_pos.log10().floor())
        } else {
            1.0
        };
        let hi = 10f64.powf(ymax.max(lo * 10.0).log10().ceil());
        let mut t = Vec::new();
        let mut v = lo;
        while v <= hi * 1.0001 && t.len() < 12 {
            t.push(v);
            v *= 10.0;
        }
        (lo, hi, t)
    } else {
        let (top, step) = nice_axis(ymax);
        let n = (top / step).round() as usize;
        (0.0, top, (0..=n).map(|i| i as f64 * step).collect())
    };
    let py = |v: f64| {
        let frac = if log {
            (clean(v).max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10())
        } else {
            clean(v) / hi
        };
        TOP + h - frac.clamp(0.0, 1.0) * h
    };
    for t in &ticks {
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            LEFT + w,
            LEFT - 6.0,
            py(*t) + 4.0,
            short(*t),
            y = py(*t)
        );
    }
    let ng = groups.len().max(1) as f64;
    let gw = w / ng;
    let bw = (gw * 0.8) / series.len().max(1) as f64;
    for (g, name) in groups.iter().enumerate() {
        let gx = LEFT + g as f64 * gw;
        for (s, (sname, vals)) in series.iter().enumerate() {
            let v = vals.get(g).copied().unwrap_or(0.0);
            let y = py(v);
            let _ = writeln!(
                out,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}</title></rect>",
                gx + gw * 0.1 + s as f64 * bw,
                y,
                bw.max(1.0),
                (TOP + h - y).max(0.0),
                COLOURS[s % COLOURS.len()],
                esc(&format!("{name}, {sname}: {}", short(v)))
            );
        }
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">{}</text>",
            gx + gw / 2.0,
            TOP + h + 18.0,
            esc(name)
        );
    }
    let _ = writeln!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>",
        TOP + h,
        LEFT + w,
        TOP + h
    );
    axis_labels(&mut out, "", y_label);
    let names: Vec<String> = series.iter().map(|s| s.0.clone()).collect();
    legend(&mut out, &names);
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_labels_and_nice_axes() {
        assert_eq!(short(1_250_000.0), "1.2M");
        assert_eq!(short(350_000.0), "350k");
        assert_eq!(short(12.0), "12");
        assert_eq!(short(0.01), "0.01");
        assert_eq!(short(0.5), "0.5");
        assert_eq!(nice_axis(93.0), (100.0, 20.0));
        assert_eq!(nice_axis(0.0), (1.0, 0.2));
        assert_eq!(esc("a<b&\"c\""), "a&lt;b&amp;&quot;c&quot;");
    }
}
