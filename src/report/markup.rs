//! Escaping user text for markup: HTML (the report and the trial pages) and XML (JUnit). Its
//! own module, below every page writer, so the pages that link to each other (`html`,
//! `trial_page`) do not depend on each other for it.

/// Escape text for HTML content and attribute values.
pub(crate) fn esc(s: &str) -> String {
    escape_markup(s, "&#39;", &['\n', '\t'], &[])
}

/// Escape `&`, `<`, `>`, `"` and `'` (as `apos`) for markup content or attribute values
/// (HTML here, XML in `junit`); a control character not in `keep`, or a character in `bad`,
/// becomes U+FFFD.
pub(crate) fn escape_markup(s: &str, apos: &str, keep: &[char], bad: &[char]) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str(apos),
            c if ((c as u32) < 0x20 && !keep.contains(&c)) || bad.contains(&c) => {
                out.push('\u{FFFD}')
            }
            c => out.push(c),
        }
    }
    out
}
