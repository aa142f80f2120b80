//! Charts as data ([`Chart`]) and as SVG, drawn server-side with plotters.
//!
//! One model serves the page (inline SVG), the SVG download and the CSV /
//! JSON downloads, so what a reader downloads is what they saw. Colours are
//! the Okabe–Ito palette, and every series also differs by dash pattern
//! and marker, so charts read without colour vision and in greyscale.
//! The legend is drawn in its own band above the plot, never over data.

use llmwatch_core::analysis::TtftBreakdown;
use plotters::chart::DualCoordChartContext;
use plotters::prelude::*;
use serde::Serialize;

/// A TTFT breakdown's parts as stacked series, bottom first: `points` are
/// (x, the breakdown at x). The unexplained rest is its own part, so a stack
/// that does not reach the client's TTFT (or overshoots it) shows why.
pub fn ttft_breakdown_series(points: &[(f64, &TtftBreakdown)]) -> Vec<Series> {
    type Part = fn(&TtftBreakdown) -> Option<f64>;
    let parts: [(&str, usize, Part); 5] = [
        ("queue", 5, |b| Some(b.queue_s)),
        ("prefill", 4, |b| Some(b.prefill_s)),
        ("server, outside the engine core", 1, |b| {
            b.server_outside_core_s
        }),
        ("network / client", 2, |b| b.network_s),
        ("unexplained", 6, |b| Some(b.unexplained_s)),
    ];
    parts
        .into_iter()
        .map(|(name, color, part)| Series {
            name: name.to_string(),
            unit: "s".to_string(),
            style: Style::new(color, Dash::Solid, Marker::Square),
            secondary: false,
            points: points
                .iter()
                .filter_map(|(x, b)| Some([*x, part(b)?]))
                .collect(),
        })
        .collect()
}

/// Okabe–Ito: black, orange, sky blue, bluish green, blue, vermillion,
/// reddish purple, yellow (last: weak on white).
/// Sweep bands: a pale amber behind the data, named in a darker one.
const BAND_FILL: RGBColor = RGBColor(253, 236, 200);
const BAND_TEXT: RGBColor = RGBColor(140, 90, 0);

pub const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 0, 0),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 158, 115),
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(204, 121, 167),
    RGBColor(240, 228, 66),
];

pub const WIDTH: u32 = 720;
pub const HEIGHT: u32 = 300;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dash {
    Solid,
    Dashed,
    Dotted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Marker {
    None,
    Circle,
    Triangle,
    Cross,
    Square,
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Style {
    /// Index into [`PALETTE`].
    pub color: usize,
    pub dash: Dash,
    pub marker: Marker,
}

impl Style {
    pub const fn new(color: usize, dash: Dash, marker: Marker) -> Style {
        Style {
            color,
            dash,
            marker,
        }
    }
}

/// What the x axis is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum XAxis {
    /// Unix milliseconds, shown as UTC clock time.
    Time { from_ms: i64, to_ms: i64 },
    /// A load ladder (concurrency or request rate), drawn on a log2 scale.
    Load { min: f64, max: f64 },
}

/// One line of a chart. Points are `[x, y]`: x in the axis' unit (Unix ms
/// or load), y in the series' unit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    pub name: String,
    pub unit: String,
    pub style: Style,
    /// Drawn against the right-hand axis (0–100 %).
    pub secondary: bool,
    pub points: Vec<[f64; 2]>,
}

/// A labelled horizontal (objective) or vertical (saturation) line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rule {
    pub label: String,
    pub value: f64,
    pub style: Style,
}

/// A shaded span of the x axis that explains the data under it (a sweep
/// loading the target), linked to where it is told in full.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Band {
    pub label: String,
    /// x in the axis' unit (Unix ms on a time axis).
    pub from: f64,
    pub to: f64,
    /// Where the band links (a same-origin page path).
    pub href: String,
}

/// A chart: what it shows, and how.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Chart {
    /// Stable id, used in download URLs (`ttft`, `kv_cache`, …).
    pub id: String,
    pub title: String,
    pub x: XAxis,
    pub x_label: String,
    /// The left axis' label, with its unit.
    pub y_label: String,
    /// The right axis' label when a series is secondary (always 0–100 %).
    pub y2_label: Option<String>,
    pub series: Vec<Series>,
    /// Horizontal lines on the left axis (objectives).
    pub hlines: Vec<Rule>,
    /// Vertical lines at an x value (saturation, max sustainable).
    pub vlines: Vec<Rule>,
    /// Shaded spans behind the data (sweeps of the target), each a link.
    pub bands: Vec<Band>,
    /// Draw the series as stacked bars (a latency breakdown): at each x the
    /// series' values are piled in series order. A negative part (two
    /// instruments disagreeing) is drawn as nothing; downloads keep it.
    pub stacked: bool,
}

impl Chart {
    /// Whether any series has a point.
    pub fn has_data(&self) -> bool {
        self.series.iter().any(|s| !s.points.is_empty())
    }

    /// Long-format CSV: `series,unit,x,y` (x in Unix ms or load).
    pub fn to_csv(&self) -> String {
        let x_name = match self.x {
            XAxis::Time { .. } => "unix_ms",
            XAxis::Load { .. } => "load",
        };
        let mut out = format!("series,unit,{x_name},value\n");
        for series in &self.series {
            for [x, y] in &series.points {
                out.push_str(&format!(
                    "{},{},{},{}\n",
                    csv_field(&series.name),
                    csv_field(&series.unit),
                    x,
                    y
                ));
            }
        }
        out
    }
}

/// Quotes a CSV field when it needs it (RFC 4180), and defuses leading
/// formula characters for spreadsheet readers.
fn csv_field(text: &str) -> String {
    let text = if text.starts_with(['=', '+', '-', '@']) {
        format!("'{text}")
    } else {
        text.to_string()
    };
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

/// The chart as a standalone SVG document (it scales: the root has a
/// `viewBox`). A chart without data still renders its frame and title,
/// with "no data" in it.
pub fn render_svg(chart: &Chart) -> String {
    let mut svg = String::new();
    if let Err(err) = draw(chart, &mut svg) {
        // Drawing into a String fails only on geometry the data could not
        // give; say so in the chart rather than failing the page.
        tracing::warn!(chart = %chart.id, error = %err, "chart drawing failed");
        svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" \
             width=\"{WIDTH}\" height=\"{HEIGHT}\"><text x=\"20\" y=\"40\">{}: cannot draw</text></svg>",
            super::escape_text(&chart.title)
        );
    }
    svg
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn draw(chart: &Chart, out: &mut String) -> DrawResult {
    let band_areas = draw_plot(chart, out)?;
    link_bands(out, &band_areas);
    Ok(())
}

/// The chart itself; answers where its bands landed.
fn draw_plot(chart: &Chart, out: &mut String) -> Result<Vec<BandArea>, Box<dyn std::error::Error>> {
    let root = SVGBackend::with_string(out, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let titled = root.titled(&chart.title, ("sans-serif", 20).into_font().color(&BLACK))?;
    let legend_rows = legend_layout(chart).last().map(|e| e.row + 1).unwrap_or(0);
    let legend_h = 18 * legend_rows as u32 + 4;
    let (legend_area, plot_area) = titled.split_vertically(legend_h);
    draw_legend(chart, &legend_area)?;

    let (x_lo, x_hi) = x_bounds(chart);
    let (y_lo, y_hi) = y_bounds(chart);
    let has_secondary = chart.series.iter().any(|s| s.secondary);
    let mut ctx = ChartBuilder::on(&plot_area)
        .margin_left(6)
        .margin_right(if has_secondary { 6 } else { 16 })
        .margin_bottom(4)
        .x_label_area_size(36)
        .y_label_area_size(62)
        .right_y_label_area_size(if has_secondary { 52 } else { 0 })
        .build_cartesian_2d(x_lo..x_hi, y_lo..y_hi)?
        .set_secondary_coord(x_lo..x_hi, 0.0..100.0);

    let x_axis = chart.x;
    let x_fmt = move |x: &f64| format_x(x_axis, *x);
    let y_fmt = |y: &f64| format_axis_number(*y);
    ctx.configure_mesh()
        .x_desc(chart.x_label.as_str())
        .y_desc(chart.y_label.as_str())
        .x_labels(match chart.x {
            XAxis::Time { .. } => 7,
            XAxis::Load { .. } => 12,
        })
        .y_labels(6)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(210, 210, 210))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .draw()?;
    if has_secondary {
        ctx.configure_secondary_axes()
            .y_desc(chart.y2_label.as_deref().unwrap_or("%"))
            .y_label_formatter(&y_fmt)
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15))
            .y_labels(6)
            .draw()?;
    }

    if !chart.has_data() {
        plot_area.draw(&Text::new(
            "no data in this range",
            (WIDTH as i32 / 2 - 70, 80),
            ("sans-serif", 14).into_font().color(&RGBColor(90, 90, 90)),
        ))?;
    }

    let band_areas = draw_bands(&mut ctx, chart, (x_lo, x_hi), (y_lo, y_hi))?;
    draw_rules(&mut ctx, chart, (x_lo, x_hi), (y_lo, y_hi))?;
    if chart.stacked {
        draw_stacks(&mut ctx, chart, (x_lo, x_hi))?;
    } else {
        draw_lines(&mut ctx, chart)?;
    }
    root.present()?;
    Ok(band_areas)
}

/// A band's place on the drawing, in pixels, with what it links to.
struct BandArea {
    left: i32,
    top: i32,
    width: i32,
    height: i32,
    label: String,
    href: String,
}

/// Shades each band (clipped to the axis) and names it at its top; answers
/// where each landed, for [`link_bands`].
fn draw_bands(
    ctx: &mut Ctx<'_, '_>,
    chart: &Chart,
    (x_lo, x_hi): (f64, f64),
    (y_lo, y_hi): (f64, f64),
) -> Result<Vec<BandArea>, Box<dyn std::error::Error>> {
    let mut areas = Vec::new();
    for band in &chart.bands {
        let from = x_value(chart.x, band.from).max(x_lo);
        let to = x_value(chart.x, band.to).min(x_hi);
        if !(from.is_finite() && to.is_finite()) || to < from {
            continue;
        }
        ctx.draw_series(std::iter::once(Rectangle::new(
            [(from, y_lo), (to, y_hi)],
            BAND_FILL.filled(),
        )))?;
        ctx.draw_series(std::iter::once(Text::new(
            band.label.clone(),
            (from, y_hi),
            ("sans-serif", 12).into_font().color(&BAND_TEXT),
        )))?;
        let (left, top) = ctx.backend_coord(&(from, y_hi));
        let (right, bottom) = ctx.backend_coord(&(to, y_lo));
        areas.push(BandArea {
            left,
            top,
            // At least a few pixels, so a short sweep on a long range is
            // still something to click.
            width: (right - left).max(4),
            height: (bottom - top).max(1),
            label: band.label.clone(),
            href: band.href.clone(),
        });
    }
    Ok(areas)
}

/// Lays a transparent link over each band, on top of the data (plotters
/// draws no links), with the band's label as its tooltip.
fn link_bands(svg: &mut String, areas: &[BandArea]) {
    if areas.is_empty() {
        return;
    }
    let Some(end) = svg.rfind("</svg>") else {
        return;
    };
    let mut links = String::new();
    for a in areas {
        let label = super::escape_text(&a.label);
        links.push_str(&format!(
            "<a class=\"band\" href=\"{}\" aria-label=\"{label}\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#000\" fill-opacity=\"0\"><title>{label}</title></rect></a>\n",
            super::escape_text(&a.href),
            a.left,
            a.top,
            a.width,
            a.height,
        ));
    }
    svg.insert_str(end, &links);
}

type Ctx<'a, 'b> = DualCoordChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// The objective lines (labelled on the plot) and the verdict marks (named
/// in the legend band: a label at the line would run off the plot at the
/// right-hand end of the axis).
fn draw_rules(
    ctx: &mut Ctx<'_, '_>,
    chart: &Chart,
    (x_lo, x_hi): (f64, f64),
    (y_lo, y_hi): (f64, f64),
) -> DrawResult {
    for rule in &chart.hlines {
        let style = shape(rule.style, 1);
        let pts = vec![(x_lo, rule.value), (x_hi, rule.value)];
        ctx.draw_series(DashedLineSeries::new(pts, 7, 4, style))?;
        ctx.draw_series(std::iter::once(Text::new(
            rule.label.clone(),
            (x_lo, rule.value),
            ("sans-serif", 14)
                .into_font()
                .color(&PALETTE[rule.style.color % 8]),
        )))?;
    }
    for rule in &chart.vlines {
        let x = x_value(chart.x, rule.value);
        let style = shape(rule.style, 2);
        let pts = vec![(x, y_lo), (x, y_hi)];
        ctx.draw_series(DashedLineSeries::new(pts, 5, 3, style))?;
    }

    Ok(())
}

/// Each series as line segments with markers, on its y axis.
fn draw_lines(ctx: &mut Ctx<'_, '_>, chart: &Chart) -> DrawResult {
    let gap = max_gap(chart);
    for series in &chart.series {
        let style = shape(series.style, 2);
        let points: Vec<(f64, f64)> = series
            .points
            .iter()
            .filter(|[x, y]| x.is_finite() && y.is_finite())
            .map(|[x, y]| (x_value(chart.x, *x), *y))
            .collect();
        let segments = split_at_gaps(&points, gap);
        let every = (points.len() / 12).max(1);
        let markers: Vec<(f64, f64)> = points.iter().step_by(every).copied().collect();
        if series.secondary {
            for seg in segments {
                match series.style.dash {
                    Dash::Solid => ctx.draw_secondary_series(LineSeries::new(seg, style))?,
                    Dash::Dashed => {
                        ctx.draw_secondary_series(DashedLineSeries::new(seg, 7, 4, style))?
                    }
                    Dash::Dotted => {
                        ctx.draw_secondary_series(DashedLineSeries::new(seg, 2, 3, style))?
                    }
                };
            }
            draw_markers(ctx, series.style, &markers, true)?;
        } else {
            for seg in segments {
                match series.style.dash {
                    Dash::Solid => ctx.draw_series(LineSeries::new(seg, style))?,
                    Dash::Dashed => ctx.draw_series(DashedLineSeries::new(seg, 7, 4, style))?,
                    Dash::Dotted => ctx.draw_series(DashedLineSeries::new(seg, 2, 3, style))?,
                };
            }
            draw_markers(ctx, series.style, &markers, false)?;
        }
    }
    Ok(())
}

/// Each x's bar: the series' (non-negative) values piled in series order.
fn draw_stacks(ctx: &mut Ctx<'_, '_>, chart: &Chart, (x_lo, x_hi): (f64, f64)) -> DrawResult {
    let mut xs: Vec<f64> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p[0]))
        .filter(|x| x.is_finite())
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    // Bars a little narrower than the closest two x values, and never wider
    // than a tenth of the axis (one bar alone).
    let positions: Vec<f64> = xs.iter().map(|x| x_value(chart.x, *x)).collect();
    let closest = positions
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|g| *g > 0.0)
        .fold(f64::INFINITY, f64::min);
    let half = (closest * 0.35).min((x_hi - x_lo) * 0.05);
    for (x, at) in xs.iter().zip(&positions) {
        let mut base = 0.0;
        for series in &chart.series {
            let Some(y) = series
                .points
                .iter()
                .find(|p| p[0] == *x)
                .map(|p| p[1])
                .filter(|y| y.is_finite() && *y > 0.0)
            else {
                continue;
            };
            let fill = PALETTE[series.style.color % PALETTE.len()].filled();
            ctx.draw_series(std::iter::once(Rectangle::new(
                [(at - half, base), (at + half, base + y)],
                fill,
            )))?;
            base += y;
        }
    }
    Ok(())
}

/// The height of the tallest stack (non-negative parts only).
fn stack_max(chart: &Chart) -> f64 {
    let mut totals: Vec<(f64, f64)> = Vec::new();
    for [x, y] in chart.series.iter().flat_map(|s| s.points.iter()) {
        if !(x.is_finite() && y.is_finite() && *y > 0.0) {
            continue;
        }
        match totals.iter_mut().find(|(tx, _)| tx == x) {
            Some(total) => total.1 += y,
            None => totals.push((*x, *y)),
        }
    }
    totals.iter().map(|(_, t)| *t).fold(0.0, f64::max)
}

/// Splits a line where consecutive points are further apart than `gap`, so
/// a down target reads as a gap, not a slope.
fn split_at_gaps(points: &[(f64, f64)], gap: f64) -> Vec<Vec<(f64, f64)>> {
    let mut segments: Vec<Vec<(f64, f64)>> = Vec::new();
    for p in points {
        match segments.last_mut() {
            Some(seg) if seg.last().is_some_and(|l| p.0 - l.0 <= gap) => seg.push(*p),
            _ => segments.push(vec![*p]),
        }
    }
    segments
}

/// Draws `points` with the series' marker, against the left (`secondary`
/// false) or right y axis.
fn draw_markers(
    ctx: &mut Ctx<'_, '_>,
    style: Style,
    points: &[(f64, f64)],
    secondary: bool,
) -> DrawResult {
    let s = shape(style, 1);
    let filled = s.filled();
    let p = points.iter().copied();
    // The element type differs per marker, so each arm draws on its own.
    macro_rules! draw {
        ($series:expr) => {
            if secondary {
                ctx.draw_secondary_series($series)?;
            } else {
                ctx.draw_series($series)?;
            }
        };
    }
    match style.marker {
        Marker::None => {}
        Marker::Circle => draw!(p.map(|c| Circle::new(c, 3, filled))),
        Marker::Triangle => draw!(p.map(|c| TriangleMarker::new(c, 4, filled))),
        Marker::Cross => draw!(p.map(|c| Cross::new(c, 3, s))),
        Marker::Square => {
            draw!(p.map(|c| EmptyElement::at(c) + Rectangle::new([(-3, -3), (3, 3)], filled)))
        }
    }
    Ok(())
}

fn shape(style: Style, width: u32) -> ShapeStyle {
    PALETTE[style.color % PALETTE.len()].stroke_width(width)
}

/// One legend entry's place in the band above the plot.
struct LegendEntry {
    row: usize,
    x: i32,
}

fn legend_items(chart: &Chart) -> Vec<(String, Style, bool)> {
    let mut items: Vec<(String, Style, bool)> = chart
        .series
        .iter()
        .map(|s| (s.name.clone(), s.style, true))
        .collect();
    items.extend(
        chart
            .hlines
            .iter()
            .chain(&chart.vlines)
            .map(|r| (r.label.clone(), r.style, false)),
    );
    items
}

fn legend_layout(chart: &Chart) -> Vec<LegendEntry> {
    let mut out = Vec::new();
    let (mut row, mut x) = (0usize, 10i32);
    for (name, _, _) in legend_items(chart) {
        let w = 34 + 7 * name.chars().count() as i32 + 14;
        if x + w > WIDTH as i32 - 10 && x > 10 {
            row += 1;
            x = 10;
        }
        out.push(LegendEntry { row, x });
        x += w;
    }
    out
}

fn draw_legend<DB: DrawingBackend>(
    chart: &Chart,
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    for ((name, style, is_series), entry) in
        legend_items(chart).into_iter().zip(legend_layout(chart))
    {
        let y = 10 + 18 * entry.row as i32;
        let x = entry.x;
        let s = shape(style, 2);
        match (style.dash, is_series) {
            (Dash::Solid, true) => {
                area.draw(&PathElement::new(vec![(x, y), (x + 26, y)], s))?;
            }
            (Dash::Dotted, true) => {
                for i in 0..6 {
                    let x0 = x + i * 5;
                    area.draw(&PathElement::new(vec![(x0, y), (x0 + 2, y)], s))?;
                }
            }
            _ => {
                for i in 0..3 {
                    let x0 = x + i * 10;
                    area.draw(&PathElement::new(vec![(x0, y), (x0 + 6, y)], s))?;
                }
            }
        }
        let c = (x + 13, y);
        let filled = s.filled();
        match style.marker {
            Marker::None => {}
            Marker::Circle => area.draw(&Circle::new(c, 3, filled))?,
            Marker::Triangle => area.draw(&TriangleMarker::new(c, 4, filled))?,
            Marker::Cross => area.draw(&Cross::new(c, 3, s))?,
            Marker::Square => area.draw(&Rectangle::new(
                [(c.0 - 3, y - 3), (c.0 + 3, y + 3)],
                filled,
            ))?,
        }
        area.draw(&Text::new(
            name,
            (x + 32, y - 7),
            ("sans-serif", 15).into_font().color(&BLACK),
        ))?;
    }
    Ok(())
}

/// The x value as drawn: load axes are log2.
fn x_value(axis: XAxis, x: f64) -> f64 {
    match axis {
        XAxis::Time { .. } => x,
        XAxis::Load { .. } => x.max(f64::MIN_POSITIVE).log2(),
    }
}

fn x_bounds(chart: &Chart) -> (f64, f64) {
    match chart.x {
        XAxis::Time { from_ms, to_ms } => {
            let hi = if to_ms > from_ms { to_ms } else { from_ms + 1 };
            (from_ms as f64, hi as f64)
        }
        XAxis::Load { min, max } => {
            let lo = x_value(chart.x, min.max(1e-3));
            let hi = x_value(chart.x, max.max(min.max(1e-3)));
            // A little room either side so end markers are not cut.
            if hi - lo < 1e-9 {
                (lo - 0.5, hi + 0.5)
            } else {
                (lo - 0.15, hi + 0.15)
            }
        }
    }
}

fn y_bounds(chart: &Chart) -> (f64, f64) {
    if chart.stacked {
        let hi = stack_max(chart);
        let hi = if hi > 0.0 { hi } else { 1.0 };
        return (0.0, hi * 1.08);
    }
    let values = chart
        .series
        .iter()
        .filter(|s| !s.secondary)
        .flat_map(|s| s.points.iter().map(|p| p[1]))
        .chain(chart.hlines.iter().map(|r| r.value))
        .filter(|v| v.is_finite());
    let (mut lo, mut hi) = (0.0f64, f64::NEG_INFINITY);
    for v in values {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !hi.is_finite() || hi <= lo {
        hi = lo + 1.0;
    }
    (lo, hi + (hi - lo) * 0.08)
}

/// The widest x step still drawn as one line: three times the median gap.
fn max_gap(chart: &Chart) -> f64 {
    let mut gaps: Vec<f64> = chart
        .series
        .iter()
        .flat_map(|s| {
            s.points
                .windows(2)
                .map(|w| x_value(chart.x, w[1][0]) - x_value(chart.x, w[0][0]))
        })
        .filter(|g| g.is_finite() && *g > 0.0)
        .collect();
    if gaps.is_empty() {
        return f64::INFINITY;
    }
    gaps.sort_by(f64::total_cmp);
    match chart.x {
        XAxis::Time { .. } => gaps[gaps.len() / 2] * 3.0,
        XAxis::Load { .. } => f64::INFINITY,
    }
}

fn format_x(axis: XAxis, x: f64) -> String {
    match axis {
        XAxis::Time { from_ms, to_ms } => {
            let long = to_ms - from_ms > 24 * 3600 * 1000;
            super::format::clock(x as i64, long)
        }
        XAxis::Load { .. } => {
            if (x - x.round()).abs() < 1e-6 {
                format_axis_number(2f64.powf(x.round()))
            } else {
                String::new()
            }
        }
    }
}

/// Compact axis numbers: 0.25, 3, 1.2k, 4M.
pub fn format_axis_number(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6).replace(".0M", "M")
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3).replace(".0k", "k")
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}").replace(".0", "")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(points: Vec<[f64; 2]>) -> Chart {
        Chart {
            id: "t".into(),
            title: "TTFT <probe>".into(),
            x: XAxis::Time {
                from_ms: 0,
                to_ms: 600_000,
            },
            x_label: "time (UTC)".into(),
            y_label: "seconds".into(),
            y2_label: None,
            series: vec![Series {
                name: "probe p95".into(),
                unit: "s".into(),
                style: Style::new(1, Dash::Solid, Marker::Circle),
                secondary: false,
                points,
            }],
            hlines: vec![Rule {
                label: "objective 1 s".into(),
                value: 1.0,
                style: Style::new(5, Dash::Dashed, Marker::None),
            }],
            vlines: vec![],
            bands: Vec::new(),
            stacked: false,
        }
    }

    #[test]
    fn svg_has_title_legend_axes_and_escapes() {
        let svg = render_svg(&chart(vec![[0.0, 0.5], [300_000.0, 0.7], [600_000.0, 1.4]]));
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.contains("viewBox"));
        assert!(svg.contains("TTFT &lt;probe&gt;"));
        assert!(svg.contains("probe p95"));
        assert!(svg.contains("objective 1 s"));
        assert!(svg.contains("time (UTC)"));
        assert!(svg.contains("00:05"), "clock labels");
        assert!(!svg.contains("no data"));
    }

    #[test]
    fn a_band_is_shaded_named_and_linked_over_its_span() {
        let mut c = chart(vec![[0.0, 0.5], [300_000.0, 0.7], [600_000.0, 1.4]]);
        c.bands.push(Band {
            label: "sweep 7 <running>".into(),
            from: 300_000.0,
            to: 450_000.0,
            href: "/sweeps/7".into(),
        });
        let svg = render_svg(&c);
        let at = svg
            .find("<a class=\"band\" href=\"/sweeps/7\"")
            .expect("band link");
        assert!(at < svg.rfind("</svg>").unwrap());
        assert!(svg.contains("sweep 7 &lt;running&gt;"), "label escaped");
        // The link covers the middle quarter of a 10-minute axis: its left
        // edge between the plot's ends, its width a quarter of theirs.
        let attr = |name: &str| -> f64 {
            let from = svg[at..].find(&format!(" {name}=\"")).unwrap() + at + name.len() + 3;
            let to = svg[from..].find('"').unwrap() + from;
            svg[from..to].parse().unwrap()
        };
        let (x, width) = (attr("x"), attr("width"));
        assert!(x > WIDTH as f64 * 0.4 && x < WIDTH as f64 * 0.6, "x {x}");
        assert!(
            width > WIDTH as f64 * 0.15 && width < WIDTH as f64 * 0.3,
            "width {width}"
        );
        // A band outside the axis is left out.
        c.bands[0].from = 900_000.0;
        c.bands[0].to = 990_000.0;
        assert!(!render_svg(&c).contains("class=\"band\""));
    }

    #[test]
    fn stacked_chart_piles_the_parts_and_skips_negative_ones() {
        let mut c = chart(vec![[0.0, 0.5], [600_000.0, 1.0]]);
        let mut second = c.series[0].clone();
        second.name = "prefill".into();
        second.points = vec![[0.0, 0.25], [600_000.0, -0.5]];
        c.series.push(second);
        c.stacked = true;
        // The tallest stack is 0.5 + 0.25; a negative part adds nothing.
        assert_eq!(stack_max(&c), 1.0);
        let (lo, hi) = y_bounds(&c);
        assert_eq!(lo, 0.0);
        assert!((hi - 1.08).abs() < 1e-12, "{hi}");
        let svg = render_svg(&c);
        // Three bars: two parts at the first x, one at the second.
        let rects = svg.matches("<rect").count();
        let lines_only = render_svg(&Chart {
            bands: Vec::new(),
            stacked: false,
            ..c.clone()
        })
        .matches("<rect")
        .count();
        assert_eq!(rects, lines_only + 3, "{svg}");
    }

    #[test]
    fn empty_chart_says_no_data() {
        let svg = render_svg(&chart(vec![]));
        assert!(svg.contains("no data in this range"));
    }

    #[test]
    fn csv_is_long_format_and_quoted() {
        let mut c = chart(vec![[1.0, 2.5]]);
        c.series[0].name = "a,b".into();
        assert_eq!(c.to_csv(), "series,unit,unix_ms,value\n\"a,b\",s,1,2.5\n");
        c.series[0].name = "=cmd".into();
        assert!(c.to_csv().contains("'=cmd"));
    }

    #[test]
    fn axis_numbers_are_compact() {
        assert_eq!(format_axis_number(0.0), "0");
        assert_eq!(format_axis_number(0.25), "0.25");
        assert_eq!(format_axis_number(2.0), "2");
        assert_eq!(format_axis_number(1500.0), "1.5k");
        assert_eq!(format_axis_number(64.0), "64");
        assert_eq!(
            format_x(
                XAxis::Load {
                    min: 1.0,
                    max: 64.0
                },
                3.0
            ),
            "8"
        );
        assert_eq!(
            format_x(
                XAxis::Load {
                    min: 1.0,
                    max: 64.0
                },
                2.5
            ),
            ""
        );
    }
}
