//! `artifacts` and the arbiter `[completion]` extension (SPEC §6).

use toml::Value;

use super::super::error::{TaskErrorKind, quote};
use super::super::model::{
    Completion, CompletionMode, DEFAULT_VALIDATION_TIMEOUT_SEC, Deliverable, ValidationCommand,
};
use super::super::toml_read::{
    container_path, expect_array, sha256_hex, string_list, type_error, unknown_value,
};
use super::{
    ARTIFACT_KEYS, COMPLETION_KEYS, DELIVERABLE_KEYS, Parser, Result, Unknown, VALIDATION_KEYS,
};

impl Parser<'_> {
    /// `artifacts` (or `steps[i].artifacts`, named by `list`).
    pub(super) fn artifacts(&mut self, list: &str, value: &Value) -> Result<Vec<String>> {
        let ctx = self.ctx.clone();
        let items = expect_array(&ctx, list, value)?;
        let mut out: Vec<String> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let field = format!("{list}[{i}]");
            let path = match item {
                Value::String(s) => container_path(&ctx, &field, s)?,
                Value::Table(_) => {
                    let t = self.table(&field, item, ARTIFACT_KEYS, &[], Unknown::Keep)?;
                    let Some(source) = t.string("source")? else {
                        return Err(ctx.value(
                            &t.key("source"),
                            "missing (an artifact table needs the container path to collect)",
                        ));
                    };
                    for key in ["destination", "exclude", "service"] {
                        if t.get(key).is_some() {
                            let k = t.key(key);
                            self.warn(&k, "not supported by arbiter, ignored");
                        }
                    }
                    container_path(&ctx, &t.key("source"), &source)?
                }
                other => {
                    return Err(type_error(&ctx, &field, "a string or a table", other));
                }
            };
            if let Some(first) = out.iter().position(|p| *p == path) {
                return Err(ctx.err(
                    TaskErrorKind::Duplicate,
                    &field,
                    format!("duplicate of {list}[{first}] ({})", quote(&path)),
                ));
            }
            out.push(path);
        }
        Ok(out)
    }

    pub(super) fn completion_table(&mut self, value: &Value) -> Result<Completion> {
        let t = self.table("completion", value, COMPLETION_KEYS, &[], Unknown::Refuse)?;
        let mode = match t.string("mode")? {
            Some(s) => CompletionMode::ALL
                .into_iter()
                .find(|m| m.as_str() == s)
                .ok_or_else(|| {
                    unknown_value(
                        &t.ctx,
                        "completion.mode",
                        &s,
                        &CompletionMode::ALL.map(|m| m.as_str()),
                    )
                })?,
            None => CompletionMode::default(),
        };
        let mut deliverables: Vec<Deliverable> = Vec::new();
        if let Some(v) = t.get("deliverables") {
            for (i, item) in expect_array(&t.ctx, &t.key("deliverables"), v)?
                .iter()
                .enumerate()
            {
                let d = self.deliverable(i, item, &deliverables)?;
                deliverables.push(d);
            }
        }
        let mut validation: Vec<ValidationCommand> = Vec::new();
        if let Some(v) = t.get("validation") {
            for (i, item) in expect_array(&t.ctx, &t.key("validation"), v)?
                .iter()
                .enumerate()
            {
                let c = self.validation_command(i, item, &validation)?;
                validation.push(c);
            }
        }
        Ok(Completion {
            mode,
            deliverables,
            validation,
        })
    }

    /// `completion.deliverables[i]`; `earlier` are the ones before it.
    fn deliverable(
        &mut self,
        i: usize,
        item: &Value,
        earlier: &[Deliverable],
    ) -> Result<Deliverable> {
        let d = self.table(
            &format!("completion.deliverables[{i}]"),
            item,
            DELIVERABLE_KEYS,
            &[],
            Unknown::Refuse,
        )?;
        let Some(file) = d.string("path")? else {
            return Err(d.ctx.value(
                &d.key("path"),
                "missing (every deliverable needs a container path)",
            ));
        };
        let file = container_path(&d.ctx, &d.key("path"), &file)?;
        if let Some(first) = earlier.iter().position(|x| x.path == file) {
            return Err(d.ctx.err(
                TaskErrorKind::Duplicate,
                &d.key("path"),
                format!(
                    "duplicate of completion.deliverables[{first}].path ({})",
                    quote(&file)
                ),
            ));
        }
        let sha256 = match d.string("sha256")? {
            Some(s) => Some(sha256_hex(&d.ctx, &d.key("sha256"), &s)?),
            None => None,
        };
        Ok(Deliverable {
            path: file,
            goal: d.string("goal")?,
            non_empty: d.boolean("non_empty")?.unwrap_or(true),
            sha256,
        })
    }

    /// `completion.validation[i]`; `earlier` are the ones before it.
    fn validation_command(
        &mut self,
        i: usize,
        item: &Value,
        earlier: &[ValidationCommand],
    ) -> Result<ValidationCommand> {
        let path = format!("completion.validation[{i}]");
        let c = self.table(&path, item, VALIDATION_KEYS, &[], Unknown::Refuse)?;
        let Some(id) = c.string("id")? else {
            return Err(c.ctx.value(
                &c.key("id"),
                "missing (every validation command needs an id)",
            ));
        };
        let id_ok = !id.is_empty()
            && id
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "._-".contains(ch));
        if !id_ok {
            return Err(c.ctx.value(
                &c.key("id"),
                format!("must match [a-zA-Z0-9._-]+ (got {})", quote(&id)),
            ));
        }
        if let Some(first) = earlier.iter().position(|x| x.id == id) {
            return Err(c.ctx.err(
                TaskErrorKind::Duplicate,
                &c.key("id"),
                format!(
                    "duplicate of completion.validation[{first}].id ({})",
                    quote(&id)
                ),
            ));
        }
        let argv = match c.get("argv") {
            Some(v) => {
                let argv = string_list(&c.ctx, &c.key("argv"), v)?;
                if argv.first().is_none_or(|a| a.is_empty()) {
                    return Err(c
                        .ctx
                        .value(&c.key("argv"), "must name a program (empty argv)"));
                }
                Some(argv)
            }
            None => None,
        };
        let shell = c.string("shell")?;
        if shell.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return Err(c.ctx.value(&c.key("shell"), "must not be empty"));
        }
        match (&argv, &shell) {
            (Some(_), Some(_)) => {
                return Err(c.ctx.err(
                    TaskErrorKind::Conflict,
                    &path,
                    "set exactly one of argv or shell (both are set)",
                ));
            }
            (None, None) => {
                return Err(c
                    .ctx
                    .value(&path, "set exactly one of argv or shell (neither is set)"));
            }
            _ => {}
        }
        let cwd = match c.string("cwd")? {
            Some(s) => Some(container_path(&c.ctx, &c.key("cwd"), &s)?),
            None => None,
        };
        Ok(ValidationCommand {
            id,
            argv,
            shell,
            cwd,
            timeout_sec: c
                .duration("timeout_sec")?
                .unwrap_or(DEFAULT_VALIDATION_TIMEOUT_SEC),
        })
    }
}
