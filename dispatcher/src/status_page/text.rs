//! User strings on the page: escaped for HTML and cut to a bounded length (used by
//! both the tables, `html.rs`, and the chart's legend, `chart.rs`).

/// Characters of a user string shown (job names, dataset ids, addresses); the
/// rest is cut with an ellipsis, so one long name cannot stretch the page. The
/// JSON has them whole.
pub const MAX_SHOWN_CHARS: usize = 80;

/// `s` cut to [`MAX_SHOWN_CHARS`], with `& < > " '` replaced by entities: safe in
/// text and quoted attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(4 * MAX_SHOWN_CHARS));
    for (i, c) in s.chars().enumerate() {
        if i == MAX_SHOWN_CHARS {
            out.push('…');
            break;
        }
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
