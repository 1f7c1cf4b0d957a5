//! A query's answer as text: an aligned table, CSV (RFC 4180) or JSON (an array of objects,
//! keys in column order).

use super::db::{Answer, Cell};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Table,
    Csv,
    Json,
}

impl Format {
    pub(crate) const NAMES: &'static str = "table, csv or json";

    pub(crate) fn parse(s: &str) -> Option<Format> {
        Some(match s {
            "table" => Format::Table,
            "csv" => Format::Csv,
            "json" => Format::Json,
            _ => return None,
        })
    }
}

pub(crate) fn render(answer: &Answer, format: Format) -> String {
    match format {
        Format::Table => table(answer),
        Format::Csv => csv(answer),
        Format::Json => json(answer),
    }
}

fn plain(c: &Cell) -> String {
    match c {
        Cell::Null => String::new(),
        Cell::Bool(b) => b.to_string(),
        Cell::Int(i) => i.to_string(),
        Cell::Real(f) => f.to_string(),
        Cell::Text(s) => s.clone(),
        Cell::Blob(n) => format!("<{n} bytes>"),
    }
}

fn table(answer: &Answer) -> String {
    let shown: Vec<Vec<String>> = answer
        .rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|c| plain(c).replace(['\n', '\r', '\t'], " "))
                .collect()
        })
        .collect();
    let mut widths: Vec<usize> = answer.columns.iter().map(|c| c.chars().count()).collect();
    for row in &shown {
        for (i, v) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(v.chars().count());
            }
        }
    }
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let w = widths.get(i).copied().unwrap_or(0);
                format!("{v}{}", " ".repeat(w.saturating_sub(v.chars().count())))
            })
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    let mut out = String::new();
    out.push_str(&line(&answer.columns));
    out.push('\n');
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    out.push_str(&rule.join("  "));
    out.push('\n');
    for row in &shown {
        out.push_str(&line(row));
        out.push('\n');
    }
    out.push_str(&format!(
        "({} row{})\n",
        answer.rows.len(),
        if answer.rows.len() == 1 { "" } else { "s" }
    ));
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv(answer: &Answer) -> String {
    let mut out = String::new();
    let header: Vec<String> = answer.columns.iter().map(|c| csv_field(c)).collect();
    out.push_str(&header.join(","));
    out.push_str("\r\n");
    for row in &answer.rows {
        let cells: Vec<String> = row.iter().map(|c| csv_field(&plain(c))).collect();
        out.push_str(&cells.join(","));
        out.push_str("\r\n");
    }
    out
}

fn json_value(c: &Cell) -> serde_json::Value {
    match c {
        Cell::Null => serde_json::Value::Null,
        Cell::Bool(b) => (*b).into(),
        Cell::Int(i) => (*i).into(),
        Cell::Real(f) => {
            serde_json::Number::from_f64(*f).map_or(serde_json::Value::Null, Into::into)
        }
        Cell::Text(s) => s.clone().into(),
        Cell::Blob(n) => format!("<{n} bytes>").into(),
    }
}

fn json(answer: &Answer) -> String {
    let mut out = String::from("[");
    for (r, row) in answer.rows.iter().enumerate() {
        out.push_str(if r == 0 { "\n  {" } else { ",\n  {" });
        for (i, (name, c)) in answer.columns.iter().zip(row).enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(&serde_json::Value::from(name.as_str()).to_string());
            out.push_str(": ");
            out.push_str(&json_value(c).to_string());
        }
        out.push('}');
    }
    out.push_str(if answer.rows.is_empty() {
        "]\n"
    } else {
        "\n]\n"
    });
    out
}
