//! `report.html`: one page of a simulation run, for people to look at and print.
//!
//! The page reads offline from its one file: the pictures are inline SVG, the style is a few inline
//! rules, and there is no script, font, image or link to fetch. Everything on it that came from the
//! user (policy specs and their knobs, paths, cluster specs) is escaped.

use std::fmt::Write as _;

use gangway_core::metrics::Summary;

use super::{COLUMNS, Picture, cells};

/// What a run was asked to do, as the page lists it: labelled values in the order they were added.
///
/// ```
/// let mut parameters = gangway::report::Parameters::new();
/// parameters.add("trace", "traces/philly.csv").add("round", "360 s");
/// assert_eq!(parameters.items()[1], ("round".to_owned(), "360 s".to_owned()));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parameters {
    items: Vec<(String, String)>,
}

impl Parameters {
    /// No parameters yet.
    pub fn new() -> Self {
        Parameters::default()
    }

    /// Adds `label` with `value` after the ones added before.
    pub fn add(&mut self, label: impl Into<String>, value: impl std::fmt::Display) -> &mut Self {
        self.items.push((label.into(), value.to_string()));
        self
    }

    /// The labelled values, in order.
    pub fn items(&self) -> &[(String, String)] {
        &self.items
    }
}

/// Escapes `text` for HTML, in element content and in quoted attribute values alike.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Wide tables scroll on screen and shrink on paper; each section starts a page when printed, and
/// pictures scale to the page's width (their viewBox keeps the proportions).
const STYLE: &str = "
body { font: 14px/1.4 system-ui, sans-serif; color: #222; max-width: 80rem; margin: 1.5rem auto; padding: 0 1rem; }
h1 { font-size: 1.5rem; margin: 0 0 .2rem; }
h2 { font-size: 1.2rem; border-bottom: 1px solid #ccc; padding-bottom: .2rem; margin-top: 2rem; }
.muted { color: #666; }
table { border-collapse: collapse; }
th, td { padding: .25rem .4rem; border-bottom: 1px solid #e4e4e4; text-align: right; white-space: nowrap; }
thead th { border-bottom: 2px solid #888; vertical-align: bottom; }
th[scope=row], thead th:first-child, .parameters td { text-align: left; }
.parameters td { white-space: normal; overflow-wrap: anywhere; }
.comparison tbody tr:nth-child(even) { background: #f5f5f5; }
.scroll { overflow-x: auto; }
figure { margin: 1.5rem 0; }
figcaption { font-size: .85rem; }
figure svg { display: block; max-width: 100%; height: auto; }
@page { margin: 1.2cm; }
@media print {
  body { font-size: 10pt; max-width: none; margin: 0; padding: 0; }
  section + section { break-before: page; }
  h2 { margin-top: 0; }
  .scroll { overflow: visible; }
  .comparison { width: 100%; font-size: 7pt; }
  .comparison th, .comparison td { padding: .1rem .2rem; white-space: normal; }
  .comparison tbody tr:nth-child(even) { background: none; }
  thead { display: table-header-group; }
  tr, figure { break-inside: avoid; }
  figure svg { width: 100%; }
}
";

/// The whole page: the run's `parameters`, the comparison of `summaries` (a row per policy, as
/// [`super::table`] prints it, marked `data-policy="SPEC"`), and the `pictures` inline; `None` when
/// gangway was built without the `plots` feature, which the page then says.
pub fn render(
    parameters: &Parameters,
    summaries: &[&Summary],
    pictures: Option<&[Picture]>,
) -> String {
    let policies: Vec<&str> = summaries.iter().map(|s| s.policy.as_str()).collect();
    let mut page = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>gangway simulate: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <header><h1>gangway simulate</h1><p class=\"muted\">gangway {}</p></header>\n",
        escape(&policies.join(", ")),
        env!("CARGO_PKG_VERSION"),
    );

    page.push_str("<section id=\"run\">\n<h2>Run</h2>\n<table class=\"parameters\">\n");
    for (label, value) in parameters.items() {
        let _ = writeln!(
            page,
            "<tr><th scope=\"row\">{}</th><td>{}</td></tr>",
            escape(label),
            escape(value)
        );
    }
    page.push_str("</table>\n</section>\n");

    page.push_str("<section id=\"comparison\">\n<h2>Comparison</h2>\n");
    page.push_str(
        "<p class=\"muted\">Times in hours over the measured jobs. rho: finish-time fairness (a job's \
         JCT over its JCT alone on its share of the cluster); rho&gt;1: the share of jobs above 1; util: \
         busy GPU-time over the cluster's; wall s: seconds the simulation took.</p>\n",
    );
    page.push_str("<div class=\"scroll\">\n<table class=\"comparison\">\n<thead><tr>");
    for column in COLUMNS {
        let _ = write!(page, "<th scope=\"col\">{}</th>", escape(column));
    }
    page.push_str("</tr></thead>\n<tbody>\n");
    for summary in summaries {
        let [policy, rest @ ..] = cells(summary);
        let _ = write!(
            page,
            "<tr data-policy=\"{}\"><th scope=\"row\">{}</th>",
            escape(&summary.policy),
            escape(&policy)
        );
        for cell in rest {
            let _ = write!(page, "<td>{}</td>", escape(&cell));
        }
        page.push_str("</tr>\n");
    }
    page.push_str("</tbody>\n</table>\n</div>\n</section>\n");

    match pictures {
        Some(pictures) => {
            // The pictures of every policy, then those of one policy each.
            let (per_policy, run_wide): (Vec<&Picture>, Vec<&Picture>) =
                pictures.iter().partition(|p| p.policy.is_some());
            charts(&mut page, "charts", "Charts", &run_wide);
            charts(&mut page, "gpus", "GPUs per job over time", &per_policy);
        }
        None => page.push_str(
            "<section id=\"charts\">\n<h2>Charts</h2>\n<p>The charts need the <code>plots</code> \
             feature, which this gangway was built without.</p>\n</section>\n",
        ),
    }
    page.push_str("</body>\n</html>\n");
    page
}

/// A section of `pictures`, each in a figure marked `data-chart="FILE"`; nothing when there are none.
fn charts(page: &mut String, id: &str, heading: &str, pictures: &[&Picture]) {
    if pictures.is_empty() {
        return;
    }
    let _ = writeln!(page, "<section id=\"{id}\">\n<h2>{}</h2>", escape(heading));
    for picture in pictures {
        // The SVG is plotters' own output, whose text it escapes itself, and carries its own title;
        // the caption names the file that holds it alone.
        let file = escape(&picture.file);
        let _ = writeln!(
            page,
            "<figure data-chart=\"{file}\">\n{}\n<figcaption class=\"muted\">{file}</figcaption>\n</figure>",
            picture.svg.trim()
        );
    }
    page.push_str("</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(policy: &str) -> Summary {
        Summary {
            policy: policy.to_owned(),
            jobs: 10,
            measured_jobs: 8,
            unfinished_jobs: 2,
            avg_jct_h: 1.234,
            p50_jct_h: 1.0,
            p95_jct_h: 2.0,
            p99_jct_h: 3.0,
            makespan_h: 12.34,
            avg_queue_h: 0.5,
            avg_ftf: Some(1.5),
            max_ftf: None,
            ftf_over_1: Some(0.25),
            jain_ftf: None,
            utilization: 0.876,
            idle_cpus: 0.0,
            idle_memory: 0.0,
            gpu_hours: 40.0,
            preemptions: 3,
            migrations: 1,
            wall_s: 0.01,
        }
    }

    #[test]
    fn escape_replaces_every_character_that_could_open_markup_or_close_an_attribute() {
        assert_eq!(
            escape(r#"<script>alert("x" & 'y')</script>"#),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;"
        );
        assert_eq!(escape("fifo,las:t=2 ü"), "fifo,las:t=2 ü");
        // Escaping twice escapes the ampersands again: the function is not meant to be idempotent.
        assert_eq!(escape("&lt;"), "&amp;lt;");
    }

    #[test]
    fn the_page_escapes_what_the_user_gave_and_keeps_the_tables_figures() {
        let hostile = "<img src=x onerror=alert(1)>";
        let mut parameters = Parameters::new();
        parameters.add("trace", format!("/tmp/{hostile}.csv"));
        let a = summary("fifo");
        let b = summary(&format!("x\"{hostile}"));
        let page = render(&parameters, &[&a, &b], None);
        assert!(!page.contains("<img"), "{page}");
        assert!(page.contains("<td>/tmp/&lt;img src=x onerror=alert(1)&gt;.csv</td>"));
        assert!(page.contains(
            "<tr data-policy=\"x&quot;&lt;img src=x onerror=alert(1)&gt;\"><th scope=\"row\">"
        ));
        // The same rounding as the terminal's table: cell for cell.
        let row = page
            .lines()
            .find(|l| l.starts_with("<tr data-policy=\"fifo\">"))
            .expect("fifo's row");
        let expected: String = cells(&a)[1..]
            .iter()
            .map(|c| format!("<td>{c}</td>"))
            .collect();
        assert!(row.ends_with(&format!("{expected}</tr>")), "{row}");
        assert!(
            row.contains("<td>8 (+2 unfinished)</td><td>1.23</td>"),
            "{row}"
        );
    }

    #[test]
    fn without_pictures_the_page_says_the_charts_need_the_plots_feature() {
        let page = render(&Parameters::new(), &[&summary("fifo")], None);
        assert!(page.contains("need the <code>plots</code> feature"));
        assert!(!page.contains("<svg"));
        let picture = |file: &str, policy: Option<&str>| Picture {
            file: file.to_owned(),
            policy: policy.map(str::to_owned),
            svg: "<svg viewBox=\"0 0 1 1\"></svg>\n".to_owned(),
        };
        let pictures = [
            picture("gpus_fifo.svg", Some("fifo")),
            picture("jct_cdf.svg", None),
        ];
        let page = render(&Parameters::new(), &[&summary("fifo")], Some(&pictures));
        assert!(!page.contains("plots</code> feature"));
        assert_eq!(page.matches("<svg").count(), 2);
        assert!(page.contains("<figure data-chart=\"gpus_fifo.svg\">"));
        // The charts of every policy come before those of one, each group in its own section.
        let charts = page.find("<section id=\"charts\">").expect("charts");
        let gpus = page.find("<section id=\"gpus\">").expect("gpus");
        assert!(charts < page.find("jct_cdf.svg").unwrap());
        assert!(page.find("jct_cdf.svg").unwrap() < gpus);
        assert!(gpus < page.find("gpus_fifo.svg").unwrap());
    }

    #[test]
    fn the_page_has_no_script_and_no_address_to_fetch() {
        let mut parameters = Parameters::new();
        parameters.add("policies", "fifo");
        let page = render(&parameters, &[&summary("fifo")], None);
        for needle in ["<script", "http:", "https:", "<link", "@import", "url("] {
            assert!(!page.contains(needle), "the page has {needle}");
        }
        assert!(page.contains("@media print"));
    }
}
