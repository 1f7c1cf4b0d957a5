//! Shell words as BuildKit's Dockerfile frontend reads them (its `shell` lexer): quotes, the
//! escape character, `$NAME` / `${NAME…}` substitution with the modifiers BuildKit knows
//! (`:-` `-` `:+` `+` `:?` `?` `#` `##` `%` `%%` `/` `//`), and the `<<` of a heredoc
//! kept together with the word after it (`<< EOF` is one word, as BuildKit sees it).
//!
//! Written after BuildKit's `frontend/dockerfile/shell/lex.go`, quirks included where they
//! change which word a Dockerfile names.

use std::collections::HashMap;

/// Variables a word is expanded with: build args and `ENV`s in scope; `None` for one
/// declared (`ARG NAME`) without a value, which reads as unset.
pub(super) type Vars = HashMap<String, Option<String>>;

/// How words are read; the defaults are those of `FROM` and `WORKDIR` expansion.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lex {
    pub(super) escape: char,
    /// Keep the quote characters in the result (`"a b"` stays `"a b"`, still one word).
    pub(super) raw_quotes: bool,
    /// Keep the escape character in the result.
    pub(super) raw_escapes: bool,
    /// A variable not in `vars` is kept as written (`$X`, `${X:-d}`) instead of read as
    /// unset: the base image may set it.
    pub(super) keep_unset: bool,
}

impl Lex {
    pub(super) fn new(escape: char) -> Lex {
        Lex {
            escape,
            raw_quotes: false,
            raw_escapes: false,
            keep_unset: false,
        }
    }

    /// `text` as one word, variables substituted and quotes removed, inner spaces kept.
    pub(super) fn word(&self, text: &str, vars: &Vars) -> Result<String, WordError> {
        Scan::new(*self, text, vars).run().map(|(word, _)| word)
    }

    /// `text` split into words (after substitution, outside quotes).
    pub(super) fn words(&self, text: &str, vars: &Vars) -> Result<Vec<String>, WordError> {
        Scan::new(*self, text, vars).run().map(|(_, words)| words)
    }
}

/// Why a word cannot be read; BuildKit fails the build with the same complaint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WordError {
    #[error("unexpected end of statement while looking for matching {0}")]
    Unterminated(&'static str),
    #[error("syntax error: missing '}}'")]
    MissingBrace,
    #[error("syntax error: missing '/' in ${{}}")]
    MissingSlash,
    #[error("syntax error: bad substitution")]
    BadSubstitution,
    #[error("unsupported modifier ({0}) in substitution")]
    Modifier(String),
    #[error("{name}: {message}")]
    Required { name: String, message: String },
    #[error("invalid pattern ({0}) in substitution")]
    Pattern(String),
}

/// Words being split: whitespace outside quotes ends one.
#[derive(Default)]
struct Split {
    buf: String,
    words: Vec<String>,
    in_word: bool,
}

impl Split {
    fn add_char(&mut self, ch: char) {
        if ch.is_whitespace() {
            if self.in_word && !self.buf.is_empty() {
                self.words.push(std::mem::take(&mut self.buf));
                self.in_word = false;
            }
        } else {
            self.add_raw_char(ch);
        }
    }

    fn add_raw_char(&mut self, ch: char) {
        self.buf.push(ch);
        self.in_word = true;
    }

    fn add_str(&mut self, text: &str) {
        text.chars().for_each(|c| self.add_char(c));
    }

    fn add_raw_str(&mut self, text: &str) {
        self.buf.push_str(text);
        self.in_word = true;
    }

    fn finish(mut self) -> Vec<String> {
        if !self.buf.is_empty() {
            self.words.push(self.buf);
        }
        self.words
    }
}

struct Scan<'a> {
    lex: Lex,
    chars: Vec<char>,
    pos: usize,
    vars: &'a Vars,
    raw_escapes: bool,
}

impl<'a> Scan<'a> {
    fn new(lex: Lex, text: &str, vars: &'a Vars) -> Scan<'a> {
        Scan {
            lex,
            chars: text.chars().collect(),
            pos: 0,
            vars,
            raw_escapes: lex.raw_escapes,
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<char> {
        let ch = self.peek();
        self.pos += usize::from(ch.is_some());
        ch
    }

    fn run(&mut self) -> Result<(String, Vec<String>), WordError> {
        self.until(None, self.lex.raw_escapes)
    }

    /// The text up to `stop` (consumed) or the end; an unmet `stop` is an error.
    fn until(
        &mut self,
        stop: Option<char>,
        raw_escapes: bool,
    ) -> Result<(String, Vec<String>), WordError> {
        let outer = std::mem::replace(&mut self.raw_escapes, raw_escapes);
        let mut result = String::new();
        let mut split = Split::default();
        while let Some(ch) = self.peek() {
            if Some(ch) == stop {
                self.next();
                self.raw_escapes = outer;
                return Ok((result, split.finish()));
            }
            match ch {
                '$' => {
                    let value = self.dollar()?;
                    result.push_str(&value);
                    split.add_str(&value);
                }
                '<' | '\'' | '"' => {
                    let text = match ch {
                        '<' => self.possible_heredoc(),
                        '\'' => self.single_quoted()?,
                        _ => self.double_quoted()?,
                    };
                    result.push_str(&text);
                    split.add_raw_str(&text);
                }
                _ => {
                    self.next();
                    if ch == self.lex.escape {
                        if self.raw_escapes {
                            split.add_raw_char(ch);
                            result.push(ch);
                        }
                        let Some(escaped) = self.next() else { break };
                        split.add_raw_char(escaped);
                        result.push(escaped);
                    } else {
                        split.add_char(ch);
                        result.push(ch);
                    }
                }
            }
        }
        self.raw_escapes = outer;
        match stop {
            Some('}') => Err(WordError::MissingBrace),
            Some(_) => Err(WordError::MissingSlash),
            None => Ok((result, split.finish())),
        }
    }

    fn single_quoted(&mut self) -> Result<String, WordError> {
        let mut out = String::new();
        let open = self.next();
        if self.lex.raw_quotes {
            out.extend(open);
        }
        loop {
            match self.next() {
                None => return Err(WordError::Unterminated("single-quote")),
                Some('\'') => {
                    if self.lex.raw_quotes {
                        out.push('\'');
                    }
                    return Ok(out);
                }
                Some(ch) => out.push(ch),
            }
        }
    }

    fn double_quoted(&mut self) -> Result<String, WordError> {
        let mut out = String::new();
        let open = self.next();
        if self.lex.raw_quotes {
            out.extend(open);
        }
        loop {
            match self.peek() {
                None => return Err(WordError::Unterminated("double-quote")),
                Some('"') => {
                    self.next();
                    if self.lex.raw_quotes {
                        out.push('"');
                    }
                    return Ok(out);
                }
                Some('$') => out.push_str(&self.dollar()?),
                Some(_) => {
                    let mut ch = self.next().unwrap_or_default();
                    if ch == self.lex.escape {
                        if self.raw_escapes {
                            out.push(ch);
                        }
                        match self.peek() {
                            None => continue,
                            Some(next) if next == '"' || next == '$' || next == self.lex.escape => {
                                ch = next;
                                self.next();
                            }
                            Some(_) => {}
                        }
                    }
                    out.push(ch);
                }
            }
        }
    }

    /// `<<` and the blanks after it stay with the next word: BuildKit reads `<< EOF` as one.
    fn possible_heredoc(&mut self) -> String {
        self.next();
        if self.peek() != Some('<') {
            return "<".to_string();
        }
        self.next();
        let mut out = "<<".to_string();
        while let Some(ch @ (' ' | '\t' | '\r')) = self.peek() {
            out.push(ch);
            self.next();
        }
        out
    }

    /// The variable's value (`Some(None)`: unset), or `None` when it is kept as written.
    fn lookup(&self, name: &str) -> Option<Option<String>> {
        match self.vars.get(name) {
            Some(value) => Some(value.clone()),
            None if self.lex.keep_unset => None,
            None => Some(None),
        }
    }

    fn dollar(&mut self) -> Result<String, WordError> {
        self.next();
        if self.peek() != Some('{') {
            let name = self.name();
            if name.is_empty() {
                return Ok("$".to_string());
            }
            return Ok(match self.lookup(&name) {
                Some(value) => value.unwrap_or_default(),
                None => format!("${name}"),
            });
        }
        self.next();
        match self.peek() {
            None => return Err(WordError::MissingBrace),
            Some('{' | '}' | ':') => return Err(WordError::BadSubstitution),
            Some(_) => {}
        }
        let name = self.name();
        let Some(mut ch) = self.next() else {
            return Err(WordError::MissingBrace);
        };
        let mut modifier = ch.to_string();
        let value = self.lookup(&name);
        match ch {
            '}' => Ok(match value {
                Some(value) => value.unwrap_or_default(),
                None => format!("${{{name}}}"),
            }),
            ':' | '+' | '-' | '?' | '#' | '%' => {
                let null_is_unset = ch == ':';
                if null_is_unset {
                    ch = self.next().ok_or(WordError::MissingBrace)?;
                    modifier.push(ch);
                }
                let pattern = ch == '#' || ch == '%';
                if null_is_unset && pattern {
                    return Err(WordError::Modifier(modifier));
                }
                let word = self.until(Some('}'), pattern)?.0;
                let Some(value) = value else {
                    return Ok(format!("${{{name}{modifier}{word}}}"));
                };
                let Some(value) = value else {
                    return match ch {
                        '-' => Ok(word),
                        '+' | '#' | '%' => Ok(String::new()),
                        '?' => Err(required(name, word, "is not allowed to be unset")),
                        _ => Err(WordError::Modifier(modifier)),
                    };
                };
                let empty = null_is_unset && value.is_empty();
                match ch {
                    '-' => Ok(if empty { word } else { value }),
                    '+' => Ok(if empty { String::new() } else { word }),
                    '?' if empty => Err(required(name, word, "is not allowed to be empty")),
                    '?' => Ok(value),
                    '#' | '%' => {
                        let greedy = word.starts_with(ch);
                        let pattern = if greedy { &word[1..] } else { &word[..] };
                        let glob = Glob::parse(pattern)?;
                        Ok(if ch == '#' {
                            glob.trim_prefix(&value, greedy)
                        } else {
                            glob.trim_suffix(&value, greedy)
                        })
                    }
                    _ => Err(WordError::Modifier(modifier)),
                }
            }
            '/' => {
                let all = self.peek() == Some('/');
                if all {
                    self.next();
                }
                let pattern = self.until(Some('/'), true)?.0;
                let replacement = self.until(Some('}'), true)?.0;
                match value {
                    None => Ok(format!("${{{name}/{pattern}/{replacement}}}")),
                    Some(None) => Ok(String::new()),
                    Some(Some(value)) => {
                        Ok(Glob::parse(&pattern)?.replace(&value, &replacement, all))
                    }
                }
            }
            _ => Err(WordError::Modifier(modifier)),
        }
    }

    /// A variable name: letters, digits and `_`; or a run of digits; or one special
    /// parameter (`@*#?-$!0`).
    fn name(&mut self) -> String {
        let mut name = String::new();
        while let Some(ch) = self.peek() {
            if name.is_empty() && ch.is_numeric() {
                while let Some(d) = self.peek().filter(|c| c.is_numeric()) {
                    name.push(d);
                    self.next();
                }
                return name;
            }
            if name.is_empty() && matches!(ch, '@' | '*' | '#' | '?' | '-' | '$' | '!' | '0') {
                self.next();
                return ch.to_string();
            }
            if !(ch.is_alphanumeric() || ch == '_') {
                break;
            }
            name.push(ch);
            self.next();
        }
        name
    }
}

fn required(name: String, word: String, default: &str) -> WordError {
    let message = if word.is_empty() {
        default.to_string()
    } else {
        word
    };
    WordError::Required { name, message }
}

/// A shell pattern of `${X#…}`, `${X%…}`, `${X/…/…}`: `*`, `?`, `\`-escaped characters.
struct Glob(Vec<Token>);

#[derive(Clone, Copy)]
enum Token {
    Any,
    One,
    Lit(char),
}

impl Glob {
    fn parse(pattern: &str) -> Result<Glob, WordError> {
        let mut tokens = Vec::new();
        let mut chars = pattern.chars().peekable();
        while let Some(ch) = chars.next() {
            tokens.push(match ch {
                '*' => Token::Any,
                '?' => Token::One,
                '\\' => match chars.next() {
                    // `}` and `/` are escaped for the `${}` around the pattern, not in it.
                    Some(c @ ('}' | '/' | '*' | '?' | '\\')) => Token::Lit(c),
                    _ => return Err(WordError::Pattern(pattern.to_string())),
                },
                c => Token::Lit(c),
            });
        }
        Ok(Glob(tokens))
    }

    /// Whether the pattern matches all of `text`.
    fn matches(&self, text: &[char]) -> bool {
        fn go(tokens: &[Token], text: &[char]) -> bool {
            match tokens.split_first() {
                None => text.is_empty(),
                Some((Token::Any, rest)) => (0..=text.len()).any(|i| go(rest, &text[i..])),
                Some((Token::One, rest)) => !text.is_empty() && go(rest, &text[1..]),
                Some((Token::Lit(c), rest)) => text.first() == Some(c) && go(rest, &text[1..]),
            }
        }
        go(&self.0, text)
    }

    fn trim_prefix(&self, value: &str, longest: bool) -> String {
        let chars: Vec<char> = value.chars().collect();
        let mut lengths: Vec<usize> = (0..=chars.len()).collect();
        if longest {
            lengths.reverse();
        }
        match lengths.into_iter().find(|&n| self.matches(&chars[..n])) {
            Some(n) => chars[n..].iter().collect(),
            None => value.to_string(),
        }
    }

    fn trim_suffix(&self, value: &str, longest: bool) -> String {
        let chars: Vec<char> = value.chars().collect();
        let mut lengths: Vec<usize> = (0..=chars.len()).collect();
        if longest {
            lengths.reverse();
        }
        let len = chars.len();
        match lengths
            .into_iter()
            .find(|&n| self.matches(&chars[len - n..]))
        {
            Some(n) => chars[..len - n].iter().collect(),
            None => value.to_string(),
        }
    }

    /// The leftmost (then longest) match replaced; every one with `all`.
    fn replace(&self, value: &str, replacement: &str, all: bool) -> String {
        let chars: Vec<char> = value.chars().collect();
        let mut out = String::new();
        let mut start = 0;
        while start <= chars.len() {
            let found = (start..=chars.len())
                .rev()
                .find(|&end| self.matches(&chars[start..end]));
            match found {
                Some(end) => {
                    out.push_str(replacement);
                    if end == start {
                        out.extend(chars.get(start));
                        start += 1;
                    } else {
                        start = end;
                    }
                    if !all {
                        out.extend(&chars[start.min(chars.len())..]);
                        return out;
                    }
                }
                None => {
                    out.extend(chars.get(start));
                    start += 1;
                }
            }
        }
        out
    }
}
