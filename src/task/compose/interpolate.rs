//! Compose's variable interpolation, as the Compose Specification defines it: `$VAR` and
//! `${VAR}` (an unset variable is an empty string, and the caller warns), `${VAR:-default}`
//! (unset or empty), `${VAR-default}` (unset), `${VAR:?message}` / `${VAR?message}` (an
//! error), `${VAR:+other}` / `${VAR+other}`, operands that interpolate in turn
//! (`${A:-${B:-x}}`), and `$$` for a literal `$`. A `$` that starts no reference (`$ 1`,
//! `$-`) is kept as written; a `${` that is not a valid reference is an error, as in compose.
//!
//! Variable names are `[_A-Za-z][_A-Za-z0-9]*` and are looked up case-sensitively.

/// Why a value cannot be interpolated. The text is compose's own, so a task author who has
/// seen compose's message recognises it; a `?` message is shown as written (never expanded:
/// no host value gets into an error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InterpolateError {
    /// `${NAME:?message}` with `NAME` unset or empty, or `${NAME?message}` with it unset.
    #[error("required variable {name} is missing a value: {message}")]
    Required { name: String, message: String },
    /// A `${` that is not a reference compose accepts.
    #[error("invalid interpolation format in {text:?}: {why}")]
    Invalid { text: String, why: &'static str },
}

/// An interpolated value and the variables that were looked up unset with no default (each
/// once, in the order met): compose warns about each and uses an empty string.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Interpolated {
    pub value: String,
    pub unset: Vec<String>,
}

/// `text` interpolated against `lookup` (`None`: the variable is not set).
pub(crate) fn interpolate(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Interpolated, InterpolateError> {
    let mut out = Interpolated::default();
    let value = expand(text, text, lookup, &mut out.unset)?;
    out.value = value;
    Ok(out)
}

/// The operators of a braced reference, longest first.
const OPERATORS: [&str; 6] = [":-", ":?", ":+", "-", "?", "+"];

fn expand(
    whole: &str,
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    unset: &mut Vec<String>,
) -> Result<String, InterpolateError> {
    let invalid = |why: &'static str| InterpolateError::Invalid {
        text: whole.to_string(),
        why,
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let close = closing_brace(body).ok_or_else(|| invalid("no closing \"}\""))?;
            let inner = &body[..close];
            rest = &body[close + 1..];
            let name_len = name_length(inner);
            if name_len == 0 {
                return Err(invalid("a reference must start with a variable name"));
            }
            let (name, op_and_arg) = inner.split_at(name_len);
            let value = lookup(name);
            if op_and_arg.is_empty() {
                match value {
                    Some(v) => out.push_str(&v),
                    None => note_unset(unset, name),
                }
                continue;
            }
            let op = OPERATORS
                .into_iter()
                .find(|op| op_and_arg.starts_with(op))
                .ok_or_else(|| invalid("unsupported operator after the variable name"))?;
            let arg = &op_and_arg[op.len()..];
            let empty_counts = op.starts_with(':');
            let present = match &value {
                Some(v) => !(empty_counts && v.is_empty()),
                None => false,
            };
            match (op.trim_start_matches(':'), present) {
                ("-", true) | ("?", true) => out.push_str(value.as_deref().unwrap_or("")),
                ("-", false) | ("+", true) => out.push_str(&expand(whole, arg, lookup, unset)?),
                ("+", false) => {}
                (_, false) => {
                    // The message as written: expanded, it could carry a host value into an
                    // error that is printed and recorded.
                    return Err(InterpolateError::Required {
                        name: name.to_string(),
                        message: arg.to_string(),
                    });
                }
                _ => return Err(invalid("unsupported operator after the variable name")),
            }
        } else {
            let name_len = name_length(after);
            if name_len == 0 {
                // Not a reference: compose keeps the `$`.
                out.push('$');
                rest = after;
                continue;
            }
            let name = &after[..name_len];
            match lookup(name) {
                Some(v) => out.push_str(&v),
                None => note_unset(unset, name),
            }
            rest = &after[name_len..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn note_unset(unset: &mut Vec<String>, name: &str) {
    if !unset.iter().any(|n| n == name) {
        unset.push(name.to_string());
    }
}

/// Length of the variable name at the start of `text` (0: none).
fn name_length(text: &str) -> usize {
    let mut chars = text.char_indices();
    match chars.next() {
        Some((_, c)) if c == '_' || c.is_ascii_alphabetic() => {}
        _ => return 0,
    }
    chars
        .find(|(_, c)| !(*c == '_' || c.is_ascii_alphanumeric()))
        .map(|(i, _)| i)
        .unwrap_or(text.len())
}

/// Index in `body` (the text after `${`) of the `}` that closes it, nested `${…}` skipped.
fn closing_brace(body: &str) -> Option<usize> {
    let bytes = body.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'$' if bytes.get(i + 1) == Some(&b'$') => i += 1,
            b'$' if bytes.get(i + 1) == Some(&b'{') => {
                depth += 1;
                i += 1;
            }
            b'}' if depth == 0 => return Some(i),
            b'}' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    None
}

/// `text` as a value of arbiter's `[environment] env`, where `${NAME}` is resolved from
/// arbiter's environment when the trial runs: compose's choices (which operand, which default,
/// unset or empty) are taken now against `lookup`, and every value that comes from
/// `host_names` (arbiter's environment) stays a `${NAME}` reference, so no value of arbiter's
/// environment is ever written into the task (nor into a record). `None` when a literal `${`
/// would remain (arbiter's env syntax cannot quote it).
pub(crate) fn to_env_template(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    host_names: &dyn Fn(&str) -> bool,
) -> Result<(Option<String>, Vec<String>), InterpolateError> {
    // A set, non-empty host variable comes back as a marker `\0NAME\0`: the same branch of
    // every operator as its value would take, without the value.
    const MARK: char = '\0';
    if text.contains(MARK) {
        return Err(InterpolateError::Invalid {
            text: text.to_string(),
            why: "a NUL character",
        });
    }
    let marked = |name: &str| match lookup(name) {
        Some(v) if !v.is_empty() && host_names(name) => Some(format!("{MARK}{name}{MARK}")),
        other => other,
    };
    let Interpolated { value, unset } = interpolate(text, &marked)?;
    let mut template = String::with_capacity(value.len());
    for (i, piece) in value.split(MARK).enumerate() {
        if i % 2 == 1 {
            template.push_str(&format!("${{{piece}}}"));
        } else if piece.contains("${") {
            return Ok((None, unset));
        } else {
            template.push_str(piece);
        }
    }
    Ok((Some(template), unset))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SET=value, EMPTY="", everything else unset.
    fn env(name: &str) -> Option<String> {
        match name {
            "SET" => Some("value".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn every_compose_form() {
        let cases: &[(&str, &str, &[&str])] = &[
            ("plain", "plain", &[]),
            ("${SET}", "value", &[]),
            ("$SET", "value", &[]),
            ("a-$SET-b", "a-value-b", &[]),
            ("$SET_x", "", &["SET_x"]),
            ("${UNSET}", "", &["UNSET"]),
            ("$UNSET and ${UNSET}", " and ", &["UNSET"]),
            ("${EMPTY}", "", &[]),
            ("${UNSET:-d}", "d", &[]),
            ("${EMPTY:-d}", "d", &[]),
            ("${SET:-d}", "value", &[]),
            ("${UNSET-d}", "d", &[]),
            ("${EMPTY-d}", "", &[]),
            ("${SET:+alt}", "alt", &[]),
            ("${EMPTY:+alt}", "", &[]),
            ("${EMPTY+alt}", "alt", &[]),
            ("${UNSET+alt}", "", &[]),
            ("${SET?boom}", "value", &[]),
            ("${EMPTY?boom}", "", &[]),
            ("${UNSET:-${SET}}", "value", &[]),
            ("${UNSET:-${OTHER:-x}y}", "xy", &[]),
            ("${UNSET:-$OTHER}", "", &["OTHER"]),
            ("${SET:-${OTHER}}", "value", &[]),
            ("$$SET", "$SET", &[]),
            ("$${SET}", "${SET}", &[]),
            ("cost: $$5", "cost: $5", &[]),
            ("$ 1 $- $", "$ 1 $- $", &[]),
            ("${UNSET:-a:-b}", "a:-b", &[]),
            ("${UNSET:-}", "", &[]),
        ];
        for (text, value, unset) in cases {
            let got = interpolate(text, &env).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(got.value, *value, "{text}");
            assert_eq!(got.unset, *unset, "{text}");
        }
    }

    #[test]
    fn required_and_invalid_references_are_errors() {
        let cases: &[(&str, &str)] = &[
            (
                "${UNSET:?set it}",
                "required variable UNSET is missing a value: set it",
            ),
            (
                "${EMPTY:?no ${SET}}",
                "required variable EMPTY is missing a value: no ${SET}",
            ),
            ("${UNSET?}", "required variable UNSET is missing a value: "),
            (
                "${SET",
                "invalid interpolation format in \"${SET\": no closing \"}\"",
            ),
            (
                "${}",
                "invalid interpolation format in \"${}\": a reference must start with a variable name",
            ),
            (
                "${1X}",
                "invalid interpolation format in \"${1X}\": a reference must start with a variable name",
            ),
            (
                "${SET/a/b}",
                "invalid interpolation format in \"${SET/a/b}\": unsupported operator after the variable name",
            ),
        ];
        for (text, message) in cases {
            let err = interpolate(text, &env).expect_err(text);
            assert_eq!(err.to_string(), *message, "{text}");
        }
    }

    #[test]
    fn env_templates_keep_host_values_as_references() {
        let host = |name: &str| name != "FIXED";
        let lookup = |name: &str| match name {
            "FIXED" => Some("/tests".to_string()),
            other => env(other),
        };
        let cases: &[(&str, Option<&str>, &[&str])] = &[
            ("${SET}", Some("${SET}"), &[]),
            ("$SET", Some("${SET}"), &[]),
            ("x${SET:-d}y", Some("x${SET}y"), &[]),
            ("${EMPTY:-d}", Some("d"), &[]),
            ("${EMPTY-d}", Some(""), &[]),
            ("${UNSET}", Some(""), &["UNSET"]),
            ("${UNSET:-${SET}}", Some("${SET}"), &[]),
            ("${SET:+on}", Some("on"), &[]),
            ("${FIXED}", Some("/tests"), &[]),
            ("$$1", Some("$1"), &[]),
            ("$${SET}", None, &[]),
        ];
        for (text, template, unset) in cases {
            let (got, got_unset) =
                to_env_template(text, &lookup, &host).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(got.as_deref(), *template, "{text}");
            assert_eq!(got_unset, *unset, "{text}");
        }
        assert!(to_env_template("${UNSET:?x}", &lookup, &host).is_err());
    }
}
