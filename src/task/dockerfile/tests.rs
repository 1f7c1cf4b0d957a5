//! The reader against BuildKit's own parser cases (`frontend/dockerfile/parser`, `shell`)
//! and against Dockerfiles shaped like the public task corpora's.

use super::lines::{DockerfileError, heredoc_word, parse};
use super::words::{Lex, Vars};
use super::*;

/// (name, content, chomp, expand, fd) of each instruction's heredocs.
type Docs = Vec<(String, String, bool, bool, u32)>;

fn docs_of(text: &str) -> Vec<Docs> {
    let parsed = parse(text);
    assert_eq!(parsed.error, None, "{text}");
    parsed
        .instructions
        .iter()
        .map(|i| {
            i.heredocs
                .iter()
                .map(|h| (h.name.clone(), h.content.clone(), h.chomp, h.expand, h.fd))
                .collect()
        })
        .collect()
}

fn doc(name: &str, content: &str, chomp: bool, expand: bool) -> (String, String, bool, bool, u32) {
    (name.to_string(), content.to_string(), chomp, expand, 0)
}

fn keywords(text: &str) -> Vec<String> {
    parse(text)
        .instructions
        .into_iter()
        .map(|i| i.keyword)
        .collect()
}

// ---- the shapes of the public corpora ----

/// SkillsBench (latex-formula-extraction): a Python heredoc after `WORKDIR`, whose first line
/// starts with `from`. Read as a `FROM`, it opened a new stage and lost `/root`.
const SKILLSBENCH_PY: &str = "FROM ubuntu:24.04

ENV DEBIAN_FRONTEND=noninteractive

RUN apt-get update && apt-get install -y \\
    python3 \\
    python3-pip \\
 && rm -rf /var/lib/apt/lists/*

# Create working directory
WORKDIR /root

COPY skills /root/.claude/skills

# Pre-download model weights to avoid timeouts
RUN python3 - <<'PY'
from huggingface_hub import snapshot_download

repos = {
    \"vikp/surya_det3\": \"467ee9ec33e6e6c5f73e57dbc1415b14032f5b95\",
}
for repo, revision in repos.items():
    snapshot_download(repo_id=repo, revision=revision)
PY
";

/// SkillsBench (organize-messy-files): a shell heredoc whose lines look like instructions.
const SKILLSBENCH_SH: &str = "FROM ubuntu:24.04
WORKDIR /root
SHELL [\"/bin/bash\", \"-o\", \"pipefail\", \"-c\"]
RUN <<'EOF'
set -euo pipefail
mkdir -p /root/papers/all
workdir /tmp
cd /root/papers/all
from=1
EOF

# Add non-PDF artifacts
COPY DAMOP.pptx /root/papers/all/
";

/// TermiGen: `cat > file << 'EOF'` (a blank after `<<`), several in a row, a Makefile with
/// tab-indented recipes, and the `WORKDIR` after them.
const TERMIGEN: &str = "FROM ubuntu:22.04

RUN apt-get update && apt-get install -y gcc make && rm -rf /var/lib/apt/lists/*

RUN mkdir -p /workspace/app

RUN cat > /workspace/app/utils.h << 'EOF'
#ifndef UTILS_H
#define UTILS_H
int add(int a, int b);
#endif
EOF

RUN cat > /workspace/app/Makefile << 'EOF'
all: app
app: main.o utils.o
\tgcc -o app main.o utils.o
EOF

WORKDIR /workspace/app
";

#[test]
fn heredoc_bodies_of_real_tasks_are_not_instructions() {
    let cases: &[(&str, &[&str], Option<&str>, usize)] = &[
        (
            SKILLSBENCH_PY,
            &["from", "env", "run", "workdir", "copy", "run"],
            Some("/root"),
            1,
        ),
        (
            SKILLSBENCH_SH,
            &["from", "workdir", "shell", "run", "copy"],
            Some("/root"),
            1,
        ),
        (
            TERMIGEN,
            &["from", "run", "run", "run", "run", "workdir"],
            Some("/workspace/app"),
            2,
        ),
    ];
    for (text, expected, workdir, heredocs) in cases {
        assert_eq!(keywords(text), *expected, "{text}");
        let dockerfile = Dockerfile::parse(text);
        assert_eq!(dockerfile.error(), None);
        assert_eq!(dockerfile.workdir().as_deref(), *workdir, "{text}");
        assert_eq!(dockerfile.heredocs().count(), *heredocs, "{text}");
        assert_eq!(dockerfile.base_images().len(), 1, "{text}");
    }
    let py = Dockerfile::parse(SKILLSBENCH_PY);
    let doc = py.heredocs().next().unwrap();
    assert_eq!(doc.name, "PY");
    assert!(!doc.expand);
    assert!(
        doc.content
            .starts_with("from huggingface_hub import snapshot_download\n")
    );
    assert!(doc.content.ends_with("revision=revision)\n"));
    let makefile = Dockerfile::parse(TERMIGEN)
        .heredocs()
        .nth(1)
        .unwrap()
        .clone();
    assert_eq!(
        makefile.content,
        "all: app\napp: main.o utils.o\n\tgcc -o app main.o utils.o\n"
    );
}

// ---- heredocs, after BuildKit's parser_heredoc_test.go ----

#[test]
fn heredocs_as_buildkit_reads_them() {
    let text = "FROM alpine:3.6
ENV NAME=me
USER <<INVALID
INVALID
RUN <<EMPTY
EMPTY
RUN 3<<EMPTY2
EMPTY2
RUN \"<<NOHEREDOC\"
RUN <<INDENT
\tfoo
\tbar
INDENT
RUN <<-UNINDENT2
\tbaz
\tquux
\tUNINDENT2
RUN <<-'NOEXPAND'
\tdon't expand $NAME
NOEXPAND
RUN <<COMMENT
# internal comment
echo foo bar # trailing comment
COMMENT
RUN --mount=type=cache,target=/foo <<MOUNT
echo hello
MOUNT
COPY <<FILE1 <<FILE2 /dest
content 1
FILE1
content 2
FILE2
COPY <<X <<Y /dest
Y
X
X
Y
RUN <<COMPLEX python3
print('hello world')
COMPLEX
RUN <<eo'f'
echo foo
eof
RUN <<eo\\'f
echo foo
eo'f
RUN <<'one two'
echo bar
one two
RUN <<$EOF
$EOF
RUN <<  EOF  > foo
EOF
run <<lower
lower
ONBUILD RUN <<ONB
echo later
ONB
";
    let mut empty2 = doc("EMPTY2", "", false, true);
    empty2.4 = 3;
    let expected: Vec<Docs> = vec![
        vec![],
        vec![],
        vec![], // USER takes no heredoc
        vec![], // so INVALID is an instruction of its own
        vec![doc("EMPTY", "", false, true)],
        vec![empty2],
        vec![],
        vec![doc("INDENT", "\tfoo\n\tbar\n", false, true)],
        vec![doc("UNINDENT2", "\tbaz\n\tquux\n", true, true)],
        vec![doc("NOEXPAND", "\tdon't expand $NAME\n", true, false)],
        vec![doc(
            "COMMENT",
            "# internal comment\necho foo bar # trailing comment\n",
            false,
            true,
        )],
        vec![doc("MOUNT", "echo hello\n", false, true)],
        vec![
            doc("FILE1", "content 1\n", false, true),
            doc("FILE2", "content 2\n", false, true),
        ],
        vec![doc("X", "Y\n", false, true), doc("Y", "X\n", false, true)],
        vec![doc("COMPLEX", "print('hello world')\n", false, true)],
        vec![doc("eof", "echo foo\n", false, false)],
        vec![doc("eo'f", "echo foo\n", false, true)],
        vec![doc("one two", "echo bar\n", false, false)],
        vec![doc("$EOF", "", false, true)],
        vec![doc("EOF", "", false, true)],
        vec![doc("lower", "", false, true)],
        vec![doc("ONB", "echo later\n", false, true)],
    ];
    assert_eq!(docs_of(text), expected);
}

#[test]
fn exec_form_and_glued_words_open_no_heredoc() {
    let text = "FROM alpine\nRUN [\"<<EOF\"]\nRUN [\"sh\", \"-c\", \"cat <<'EOF'\"]\nRUN cat<<EOF\nRUN echo '<<EOF'\nRUN echo don't <<EOF\nWORKDIR /w\n";
    assert_eq!(docs_of(text), vec![Vec::new(); 7]);
    assert_eq!(dockerfile_workdir(text).as_deref(), Some("/w"));
}

#[test]
fn heredoc_words_after_buildkit() {
    for word in [
        "<<EOF",
        "<<'EOF'",
        "<<\"EOF\"",
        "<<-EOF",
        "<<-'EOF'",
        "<<-\"EOF\"",
        "<<EO\"F\"",
        "<< EOF",
        "<<- EOF",
    ] {
        let doc = heredoc_word(word)
            .unwrap()
            .unwrap_or_else(|| panic!("{word}"));
        assert_eq!(doc.name, "EOF", "{word}");
    }
    for word in ["", "EOF", "<<", "<<-", "<EOF", "<<<EOF", "<<EOF sh"] {
        assert_eq!(heredoc_word(word), Ok(None), "{word}");
    }
    for word in ["<<'EOF", "<<\"EOF", "<<EOF'", "<<EOF\""] {
        assert!(heredoc_word(word).is_err(), "{word}");
    }
    let doc = heredoc_word("4<<-'EOF'").unwrap().unwrap();
    assert_eq!((doc.fd, doc.chomp, doc.expand), (4, true, false));
}

#[test]
fn what_buildkit_refuses_is_an_error_with_what_came_before() {
    let cases: &[(&str, DockerfileError, usize)] = &[
        (
            "FROM alpine\nWORKDIR /a\nRUN <<EOF\necho never ends\n",
            DockerfileError::UnterminatedHeredoc { line: 3 },
            2,
        ),
        (
            "FROM alpine\nRUN <<EOF\necho\nEOF \n",
            DockerfileError::UnterminatedHeredoc { line: 2 },
            1,
        ),
        (
            "# escape=x\nFROM alpine\n",
            DockerfileError::Escape {
                line: 1,
                value: "x".to_string(),
            },
            0,
        ),
        (
            "# syntax=docker/dockerfile:1\n# SYNTAX=x\nFROM alpine\n",
            DockerfileError::RepeatedDirective {
                line: 2,
                name: "syntax".to_string(),
            },
            0,
        ),
        (
            "FROM alpine\nRUN [1, 2]\n",
            DockerfileError::JsonNotStrings { line: 2 },
            1,
        ),
        ("# only a comment\n\n", DockerfileError::Empty, 0),
    ];
    for (text, error, before) in cases {
        let parsed = parse(text);
        assert_eq!(parsed.error.as_ref(), Some(error), "{text}");
        assert_eq!(parsed.instructions.len(), *before, "{text}");
        assert_eq!(dockerfile_workdir(text), None, "{text}");
    }
    assert_eq!(
        Dockerfile::parse("FROM alpine\nRUN <<EOF\n")
            .error()
            .map(ToString::to_string)
            .as_deref(),
        Some("line 2: unterminated heredoc")
    );
    // The base images read before the refusal still name what the build needed.
    assert_eq!(
        dockerfile_base_images("FROM python:3.12\nRUN <<EOF\n"),
        ["python:3.12"]
    );
}

// ---- directives, continuations, comments ----

#[test]
fn parser_directives_count_only_at_the_very_top() {
    let cases: &[(&str, &[&str], char)] = &[
        (
            "# escape=`\nFROM alpine\nRUN a `\n  b\n",
            &["from", "run"],
            '`',
        ),
        ("#escape=`\nFROM alpine\n", &["from"], '`'),
        ("# EScape = `  \nFROM alpine\n", &["from"], '`'),
        (
            "# syntax=docker/dockerfile:1.4\n# check=skip=all\n# escape=`\nFROM alpine\n",
            &["from"],
            '`',
        ),
        // After a blank line, an ordinary comment or an instruction: just a comment.
        ("\n# escape=`\nFROM alpine\n", &["from"], '\\'),
        ("# hello\n# escape=`\nFROM alpine\n", &["from"], '\\'),
        ("FROM alpine\n# escape=`\n", &["from"], '\\'),
        ("# unknown=1\n# escape=`\nFROM alpine\n", &["from"], '\\'),
        ("\u{feff}# escape=`\nFROM alpine\n", &["from"], '`'),
    ];
    for (text, expected, escape) in cases {
        let parsed = parse(text);
        assert_eq!(parsed.error, None, "{text}");
        assert_eq!(parsed.escape, *escape, "{text}");
        assert_eq!(keywords(text), *expected, "{text}");
    }
}

#[test]
fn continuations_join_lines_and_skip_comments_and_blanks() {
    let args = |text: &str| -> Vec<String> {
        parse(text)
            .instructions
            .into_iter()
            .map(|i| i.args)
            .collect()
    };
    let cases: &[(&str, &[&str])] = &[
        ("RUN a \\\n  b\n", &["a   b"]),
        ("RUN a\\\nb\n", &["ab"]),
        ("RUN a \\  \t\n  b\n", &["a   b"]),
        ("RUN a \\\n# a comment\n\n   \n  b\n", &["a   b"]),
        ("RUN a \\\n  # indented comment \\\n  b\n", &["a   b"]),
        ("RUN echo \\\\\nRUN b\n", &["echo \\\\", "b"]),
        (
            "# escape=`\nRUN a `\n  b\nRUN c:\\\nRUN d\n",
            &["a   b", "c:\\", "d"],
        ),
        ("RUN a \\\r\n  b\r\nRUN c\r\n", &["a   b", "c"]),
        ("RUN a \\\n", &["a"]),
        ("   RUN indented\n\t# comment\n", &["indented"]),
    ];
    for (text, expected) in cases {
        assert_eq!(args(text), *expected, "{text:?}");
    }
}

#[test]
fn keywords_and_flags() {
    let parsed = parse(
        "from --platform=$BUILDPLATFORM golang AS build\nCoPy --from=build --chown=\"a b\" /x /y\nRUN -- --not-a-flag\n",
    );
    let seen: Vec<(&str, Vec<&str>, &str)> = parsed
        .instructions
        .iter()
        .map(|i| {
            let flags = i.flags.iter().map(String::as_str).collect();
            (i.keyword.as_str(), flags, i.args.as_str())
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("from", vec!["--platform=$BUILDPLATFORM"], "golang AS build"),
            ("copy", vec!["--from=build", "--chown=a b"], "/x /y"),
            ("run", vec![], "--not-a-flag"),
        ]
    );
}

// ---- words, after BuildKit's shell lexer ----

#[test]
fn substitution_as_buildkit_does_it() {
    let vars: Vars = [
        ("SET", Some("value")),
        ("EMPTY", Some("")),
        ("DECLARED", None),
        ("PATHY", Some("/usr/local/lib/python")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
    .collect();
    let cases: &[(&str, &str, &str)] = &[
        // (word, unset read as empty, unknown kept as written)
        ("$SET", "value", "value"),
        ("${SET}-x", "value-x", "value-x"),
        ("${UNKNOWN}", "", "${UNKNOWN}"),
        ("$UNKNOWN/a", "/a", "$UNKNOWN/a"),
        ("$DECLARED/a", "/a", "/a"),
        ("${SET:-d}", "value", "value"),
        ("${EMPTY:-d}", "d", "d"),
        ("${EMPTY-d}", "", ""),
        ("${DECLARED:-d}", "d", "d"),
        ("${UNKNOWN:-d}", "d", "${UNKNOWN:-d}"),
        ("${SET:+alt}", "alt", "alt"),
        ("${EMPTY:+alt}", "", ""),
        ("${EMPTY+alt}", "alt", "alt"),
        ("${DECLARED:+alt}", "", ""),
        (
            "${PATHY#*/}",
            "usr/local/lib/python",
            "usr/local/lib/python",
        ),
        ("${PATHY##*/}", "python", "python"),
        ("${PATHY%/*}", "/usr/local/lib", "/usr/local/lib"),
        ("${PATHY%%/lib*}", "/usr/local", "/usr/local"),
        (
            "${PATHY/l/L}",
            "/usr/Local/lib/python",
            "/usr/Local/lib/python",
        ),
        (
            "${PATHY//l/L}",
            "/usr/LocaL/Lib/python",
            "/usr/LocaL/Lib/python",
        ),
        ("\"/a b\"/'$SET'", "/a b/$SET", "/a b/$SET"),
        ("\"$SET\"", "value", "value"),
        ("\\$SET", "$SET", "$SET"),
        ("a$", "a$", "a$"),
    ];
    let lex = Lex::new('\\');
    let keep = Lex {
        keep_unset: true,
        ..lex
    };
    for (word, empty, kept) in cases {
        assert_eq!(lex.word(word, &vars).as_deref(), Ok(*empty), "{word}");
        assert_eq!(keep.word(word, &vars).as_deref(), Ok(*kept), "{word}");
    }
    for word in [
        "${",
        "${}",
        "${:x}",
        "${SET:#x}",
        "${SET",
        "'open",
        "\"open",
        "${UNSET?gone}",
    ] {
        assert!(lex.word(word, &vars).is_err(), "{word}");
    }
    assert_eq!(
        lex.words("a \"b c\" $SET '' d", &vars).unwrap(),
        ["a", "b c", "value", "d"]
    );
}

// ---- stages: FROM, ARG, ENV, WORKDIR ----

#[test]
fn base_images_of_real_shaped_dockerfiles() {
    let cases: &[(&str, &[&str])] = &[
        ("FROM python:3.12-slim\nRUN true\n", &["python:3.12-slim"]),
        (
            "ARG BASE=ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624\nFROM ${BASE}\n",
            &["ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624"],
        ),
        (
            "ARG PY=3.11\nFROM --platform=linux/amd64 python:${PY}-slim AS build\nRUN make\nFROM debian:bookworm\nCOPY --from=build /out /out\n",
            &["python:3.11-slim", "debian:bookworm"],
        ),
        (
            "FROM golang:1.22 AS builder\nFROM builder AS test\nFROM scratch\nCOPY --from=builder /app /app\n",
            &["golang:1.22"],
        ),
        (
            "# syntax=docker/dockerfile:1\n# comment\nfrom \\\n  ubuntu:22.04\nFROM ubuntu:22.04\n",
            &["ubuntu:22.04"],
        ),
        ("ARG TAG\nFROM node:${TAG:-20}\n", &["node:20"]),
        ("ARG TAG=\nFROM node:${TAG:-20}\n", &["node:20"]),
        ("ARG TAG=\nFROM node${TAG:+:}${TAG}\n", &["node"]),
        ("ARG TAG=22\nFROM node${TAG:+:}${TAG}\n", &["node:22"]),
        (
            "ARG V=3.12\nARG IMG=\"python:$V\"\nFROM $IMG\n",
            &["python:3.12"],
        ),
        ("FROM $UNKNOWN_BASE\n", &["$UNKNOWN_BASE"]),
        ("FROM img-$TARGETARCH\n", &["img-amd64"]),
        ("# escape=`\nFROM `\n  alpine:3.20\n", &["alpine:3.20"]),
        ("FROM alpine AS Alpine\nFROM alpine\n", &["alpine"]),
        (
            "FROM python:3.12 AS base\nRUN <<EOF\nfrom os import path\nEOF\nFROM base\n",
            &["python:3.12"],
        ),
        // An ARG after the first FROM is not global.
        ("FROM a:1\nARG B=b:2\nFROM $B\n", &["a:1", "$B"]),
        ("RUN echo no from\n", &[]),
    ];
    for (dockerfile, expected) in cases {
        assert_eq!(
            dockerfile_base_images(dockerfile),
            *expected,
            "{dockerfile}"
        );
    }
}

#[test]
fn final_stage_workdir() {
    let cases: &[(&str, Option<&str>)] = &[
        ("FROM python:3.12-slim\nWORKDIR /app\n", Some("/app")),
        (
            "FROM ubuntu:24.04\nWORKDIR /workspace\nWORKDIR src\n",
            Some("/workspace/src"),
        ),
        ("FROM ubuntu:24.04\nWORKDIR rel\n", Some("/rel")),
        (
            "FROM ubuntu:24.04\nWORKDIR /a\nWORKDIR ../b/./c\n",
            Some("/b/c"),
        ),
        ("FROM ubuntu:24.04\nWORKDIR /app/\n", Some("/app/")),
        ("FROM ubuntu:24.04\nRUN true\n", None),
        (
            "FROM golang:1.22 AS build\nWORKDIR /src\nFROM debian:bookworm\nCOPY --from=build /src/app /usr/bin/\n",
            None,
        ),
        (
            "FROM python:3.11 AS base\nWORKDIR /app\nFROM base AS test\nRUN pytest\n",
            Some("/app"),
        ),
        (
            "FROM python:3.11 AS base\nWORKDIR /app\nFROM base\nWORKDIR tests\n",
            Some("/app/tests"),
        ),
        ("from alpine\nworkdir \"/home/user\"\n", Some("/home/user")),
        ("FROM alpine\nWORKDIR \\\n  /tmp/x\n", Some("/tmp/x")),
        ("FROM alpine\nWORKDIR $HOME/w\n", Some("$HOME/w")),
        // ARG and ENV inside the stage.
        (
            "FROM alpine\nARG APP=/srv/app\nWORKDIR $APP\n",
            Some("/srv/app"),
        ),
        (
            "FROM alpine\nENV HOME=/home/agent\nWORKDIR ${HOME}/work\n",
            Some("/home/agent/work"),
        ),
        (
            "FROM alpine\nENV ROOT /opt\nENV APP=${ROOT}/app\nWORKDIR $APP\n",
            Some("/opt/app"),
        ),
        (
            "FROM alpine\nARG DIR\nWORKDIR ${DIR:-/workspace}\n",
            Some("/workspace"),
        ),
        ("FROM alpine\nARG DIR=/x\nWORKDIR ${DIR:+/y}\n", Some("/y")),
        // A global ARG reaches a stage only through a bare `ARG NAME` there.
        (
            "ARG DIR=/global\nFROM alpine\nARG DIR\nWORKDIR $DIR\n",
            Some("/global"),
        ),
        ("ARG DIR=/global\nFROM alpine\nWORKDIR $DIR/x\n", Some("/x")),
        (
            "ARG DIR=/global\nFROM alpine\nARG DIR=/local\nWORKDIR $DIR\n",
            Some("/local"),
        ),
        // A later stage inherits the variables of the stage it is built from.
        (
            "FROM alpine AS base\nENV APP=/app\nFROM base\nWORKDIR $APP/src\n",
            Some("/app/src"),
        ),
        // `ENV A=1 B=$A` reads the A from before the instruction.
        (
            "FROM alpine\nENV A=/old\nENV A=/new B=$A\nWORKDIR $B\n",
            Some("/old"),
        ),
        // The heredoc of the SkillsBench shape, and a stage name that is not a base.
        (SKILLSBENCH_PY, Some("/root")),
        (
            "FROM python:3.12 AS Build\nWORKDIR /b\nFROM build\n",
            Some("/b"),
        ),
        (
            "# escape=`\nFROM alpine\nWORKDIR C:\\app `\n\\sub\n",
            Some("/C:\\app \\sub"),
        ),
        // Checked against BuildKit v0.26.3's parser and shell lexer, like the cases above.
        ("FROM alpine\nWORKDIR \\\n# c\n\n  /tmp/x\n", Some("/tmp/x")),
        (
            "FROM alpine\nRUN cat > /f << 'EOF'\nWORKDIR /no\nEOF\nWORKDIR /yes\n",
            Some("/yes"),
        ),
        (
            "FROM alpine\nRUN <<-EOF\n\tWORKDIR /no\n\tEOF\nWORKDIR /yes\n",
            Some("/yes"),
        ),
        (
            "FROM alpine\nCOPY <<a <<b /dst\nWORKDIR /no\na\nFROM x\nb\nWORKDIR /yes\n",
            Some("/yes"),
        ),
        (
            "FROM alpine\nONBUILD RUN <<E\nWORKDIR /no\nE\nWORKDIR /yes\n",
            Some("/yes"),
        ),
        (
            "FROM alpine\nWORKDIR /a\nUSER <<X\nWORKDIR /b\n",
            Some("/b"),
        ),
        ("\n# escape=`\nFROM alpine\nWORKDIR /a `\n", Some("/a `")),
        (
            "FROM alpine\nENV P=/usr/local/lib/python\nWORKDIR ${P%/*}\n",
            Some("/usr/local/lib"),
        ),
    ];
    for (dockerfile, expected) in cases {
        assert_eq!(
            dockerfile_workdir(dockerfile).as_deref(),
            *expected,
            "{dockerfile}"
        );
    }
}
