//! The matrix's plots (PNG and SVG through plotters): throughput and
//! cycles/byte against connections and against delay.

use std::path::Path;

use anyhow::{anyhow, bail, Result};

use super::results::Cell;

fn register_font() -> Result<()> {
    let candidates = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    ];
    let path = candidates
        .iter()
        .find(|p| Path::new(p).exists())
        .ok_or_else(|| {
            anyhow!("no DejaVu/Liberation sans font found (apt-get install fonts-dejavu-core)")
        })?;
    let bytes: &'static [u8] = Box::leak(std::fs::read(path)?.into_boxed_slice());
    plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("{path}: not a usable font"))?;
    Ok(())
}

type Series = (String, Vec<(f64, f64)>);

fn plot_png_svg(
    out: &Path,
    stem: &str,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    log_x: bool,
    series: &[Series],
) -> Result<Vec<String>> {
    use plotters::prelude::*;
    let pts: Vec<(f64, f64)> = series.iter().flat_map(|s| s.1.iter().copied()).collect();
    if pts.is_empty() {
        bail!("{stem}: no data");
    }
    let xmax = pts.iter().map(|p| p.0).fold(1.0, f64::max);
    let xmin = pts.iter().map(|p| p.0).fold(f64::MAX, f64::min);
    let ymax = pts.iter().map(|p| p.1).fold(0.0, f64::max) * 1.15 + 1e-9;
    let mut files = Vec::new();
    macro_rules! draw {
        ($backend:expr) => {{
            let root = $backend.into_drawing_area();
            root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
            let mut b = ChartBuilder::on(&root);
            b.caption(title, ("sans-serif", 20))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(60);
            macro_rules! body {
                ($chart:expr) => {{
                    let mut chart = $chart;
                    chart
                        .configure_mesh()
                        .x_desc(x_desc)
                        .y_desc(y_desc)
                        .draw()
                        .map_err(|e| anyhow!("{e:?}"))?;
                    for (i, (name, s)) in series.iter().enumerate() {
                        let col = Palette99::pick(i).to_rgba();
                        chart
                            .draw_series(LineSeries::new(s.iter().copied(), col.stroke_width(2)))
                            .map_err(|e| anyhow!("{e:?}"))?
                            .label(name.as_str())
                            .legend(move |(x, y)| {
                                PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2))
                            });
                        chart
                            .draw_series(s.iter().map(|&p| Circle::new(p, 3, col.filled())))
                            .map_err(|e| anyhow!("{e:?}"))?;
                    }
                    chart
                        .configure_series_labels()
                        .background_style(WHITE.mix(0.8))
                        .border_style(BLACK)
                        .draw()
                        .map_err(|e| anyhow!("{e:?}"))?;
                }};
            }
            if log_x {
                body!(b
                    .build_cartesian_2d((xmin.max(0.5)..xmax * 1.5).log_scale(), 0.0..ymax)
                    .map_err(|e| anyhow!("{e:?}"))?);
            } else {
                body!(b
                    .build_cartesian_2d(xmin.min(0.0)..xmax * 1.05 + 1.0, 0.0..ymax)
                    .map_err(|e| anyhow!("{e:?}"))?);
            }
            root.present().map_err(|e| anyhow!("{e:?}"))?;
        }};
    }
    let png = out.join(format!("{stem}.png"));
    draw!(BitMapBackend::new(&png, (900, 560)));
    files.push(png.display().to_string());
    let svg = out.join(format!("{stem}.svg"));
    draw!(SVGBackend::new(&svg, (900, 560)));
    files.push(svg.display().to_string());
    Ok(files)
}

/// Throughput and cycles/byte against connections (one line per backend and
/// delay) and against delay (one line per backend and connection count), for
/// the largest buffer size.
pub fn plots(cells: &[Cell], out: &Path) -> Result<Vec<String>> {
    register_font()?;
    let ok: Vec<&Cell> = cells.iter().filter(|c| c.mbit_s.is_some()).collect();
    let buf = ok
        .iter()
        .map(|c| c.buffer)
        .max()
        .ok_or_else(|| anyhow!("no successful cells"))?;
    let ok: Vec<&Cell> = ok.into_iter().filter(|c| c.buffer == buf).collect();
    let mut keys_d: Vec<(String, f64)> = Vec::new();
    let mut keys_c: Vec<(String, usize)> = Vec::new();
    for c in &ok {
        if !keys_d.iter().any(|k| k.0 == c.label() && k.1 == c.delay_ms) {
            keys_d.push((c.label(), c.delay_ms));
        }
        if !keys_c
            .iter()
            .any(|k| k.0 == c.label() && k.1 == c.connections)
        {
            keys_c.push((c.label(), c.connections));
        }
    }
    let by_conns = |f: &dyn Fn(&Cell) -> Option<f64>| -> Vec<Series> {
        keys_d
            .iter()
            .map(|(b, d)| {
                let mut v: Vec<(f64, f64)> = ok
                    .iter()
                    .filter(|c| c.label() == *b && c.delay_ms == *d)
                    .filter_map(|c| f(c).map(|y| (c.connections as f64, y)))
                    .collect();
                v.sort_by(|a, b| a.0.total_cmp(&b.0));
                (format!("{b}, delay {d} ms"), v)
            })
            .collect()
    };
    let by_delay = |f: &dyn Fn(&Cell) -> Option<f64>| -> Vec<Series> {
        keys_c
            .iter()
            .map(|(b, n)| {
                let mut v: Vec<(f64, f64)> = ok
                    .iter()
                    .filter(|c| c.label() == *b && c.connections == *n)
                    .filter_map(|c| f(c).map(|y| (c.delay_ms, y)))
                    .collect();
                v.sort_by(|a, b| a.0.total_cmp(&b.0));
                (format!("{b}, {n} conn"), v)
            })
            .collect()
    };
    let thr = |c: &Cell| c.mbit_s;
    let cpb = |c: &Cell| c.cycles_per_byte_system;
    let bl = format!("{buf}-byte buffers, MTU 1500, veth test bed");
    let mut files = Vec::new();
    files.extend(plot_png_svg(
        out,
        "throughput_vs_connections",
        &format!("Throughput vs connections ({bl})"),
        "connections",
        "Mbit/s (receiver)",
        true,
        &by_conns(&thr),
    )?);
    files.extend(plot_png_svg(
        out,
        "cycles_per_byte_vs_connections",
        &format!("Cycles/byte (system) vs connections ({bl})"),
        "connections",
        "cycles per payload byte",
        true,
        &by_conns(&cpb),
    )?);
    files.extend(plot_png_svg(
        out,
        "throughput_vs_delay",
        &format!("Throughput vs one-way delay ({bl})"),
        "delay added in each direction (ms; RTT + 2x)",
        "Mbit/s (receiver)",
        false,
        &by_delay(&thr),
    )?);
    files.extend(plot_png_svg(
        out,
        "cycles_per_byte_vs_delay",
        &format!("Cycles/byte (system) vs one-way delay ({bl})"),
        "delay added in each direction (ms; RTT + 2x)",
        "cycles per payload byte",
        false,
        &by_delay(&cpb),
    )?);
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::results::test_cell as cell;

    #[test]
    fn plots_from_synthetic_cells() {
        let cells = vec![
            cell(1, 0.0, 5000.0),
            cell(16, 0.0, 4000.0),
            cell(1, 10.0, 900.0),
        ];
        let dir = std::env::temp_dir().join(format!("ttcp-plots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        match plots(&cells, &dir) {
            Ok(files) => {
                assert_eq!(files.len(), 8);
                for f in files {
                    assert!(std::fs::metadata(&f).unwrap().len() > 1000, "{f}");
                }
            }
            // A machine without the font still gets the JSON and the table.
            Err(e) => assert!(e.to_string().contains("font"), "{e:#}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
