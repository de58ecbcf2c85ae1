//! The book's settings reference (`docs/src/reference/settings.md`), rendered from the clap
//! definitions of every setting ([`Config`], with the flattened local, provider and limit
//! settings, and the subcommands), so that it cannot drift from what the binary reads. The
//! test compares the committed page with a fresh rendering and fails, naming the command that
//! writes it again, when they differ; another test finds every `AGENT_AS_MODEL_*` variable
//! the source names and requires each to be a setting here or one of [`OTHER_VARIABLES`].

use crate::config::Config;
use clap::{Arg, CommandFactory};
use std::fmt::Write as _;

/// Where the page lives, from the crate's root.
const PAGE: &str = "docs/src/reference/settings.md";

/// The command that writes the page again.
const REGENERATE: &str = "BLESS=1 cargo test --lib settings_reference";

/// Variables read outside the command line's definitions: name, default, meaning.
const OTHER_VARIABLES: &[(&str, &str, &str)] = &[
    (
        "AGENT_AS_MODEL_CACHE_DIR",
        "the user's cache directory",
        "Where models are fetched to: the default model and `hf:` files \
         (`~/.cache/agent-as-model` on Linux).",
    ),
    (
        "AGENT_AS_MODEL_THINKING_KEY",
        "a key drawn at start",
        "The key that signs Anthropic `thinking` blocks (an HMAC of their text); give replicas \
         behind one address the same one, so that a block made by one is recognised by another.",
    ),
    (
        "AGENT_AS_MODEL_LAUNCH_KEY",
        "set by `launch`",
        "Not a setting: the variable in which `launch` hands the CLI it runs its token, for a \
         CLI whose settings name a variable for it (Codex CLI, opencode).",
    ),
    (
        "RUST_LOG",
        "`warn` (`info` with JSON logs)",
        "The log filter (`info`, `debug`, …); logs go to stderr, stdout carries only JSON-RPC. \
         llama.cpp's own lines (target `llama-cpp-2`) show from `error` unless the filter \
         names them: `RUST_LOG=warn,llama-cpp-2=info` shows the devices, buffers and offloaded \
         layers of each model loaded. `RUST_LOG=debug` also prints (the start of) whole \
         messages: for troubleshooting only.",
    ),
];

/// The page, rendered from the definitions.
fn render() -> String {
    let command = Config::command();
    let mut page = String::from(
        "# Settings reference\n\n\
         <!-- Generated from the settings' definitions (src/config.rs, src/limits.rs) by the \
         test src/settings_reference.rs: do not edit by hand. To write it again: \
         BLESS=1 cargo test --lib settings_reference -->\n\n\
         Every setting is an environment variable and a command-line flag; a flag given wins \
         over the variable. `agent-as-model --help` lists the same settings (all but \
         `HF_ENDPOINT` and `HF_TOKEN`, read as the Hugging Face Hub's own client reads them). \
         What they are for, and the bounds no setting changes, are in \
         [Configuration](../configuration.md).\n\n\
         | variable | flag | default |\n| --- | --- | --- |\n",
    );
    let settings = settings(&command);
    for (scope, arg) in &settings {
        let _ = writeln!(
            page,
            "| [`{env}`](#{anchor}) | {flag} | {default} |",
            env = env_name(arg),
            anchor = env_name(arg).to_ascii_lowercase(),
            flag = flag(scope, arg),
            default = default(arg).replace('|', "\\|"),
        );
    }
    for (name, default, _) in OTHER_VARIABLES {
        let anchor = name.to_ascii_lowercase();
        let _ = writeln!(page, "| [`{name}`](#{anchor}) | — | {default} |");
    }
    page.push_str("\n## Settings\n");
    for (scope, arg) in &settings {
        setting_section(&mut page, scope, arg);
    }
    page.push_str("\n## Other environment variables\n");
    for (name, default, meaning) in OTHER_VARIABLES {
        let _ = write!(
            page,
            "\n### `{name}`\n\n- default: {default}\n\n{meaning}\n"
        );
    }
    commands_section(&mut page, &command);
    page
}

/// Every argument read from an environment variable, with the subcommand it belongs to
/// (empty for the server's own), in the order they are defined.
fn settings(command: &clap::Command) -> Vec<(String, Arg)> {
    let mut found: Vec<(String, Arg)> = command
        .get_arguments()
        .filter(|a| a.get_env().is_some())
        .map(|a| (String::new(), a.clone()))
        .collect();
    for sub in command.get_subcommands() {
        let name = sub.get_name().to_owned();
        found.extend(
            sub.get_arguments()
                .filter(|a| a.get_env().is_some())
                .map(|a| (name.clone(), a.clone())),
        );
    }
    found
}

fn env_name(arg: &Arg) -> String {
    arg.get_env()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// `--flag`, prefixed with its subcommand.
fn flag(scope: &str, arg: &Arg) -> String {
    let long = arg.get_long().map(|l| format!("--{l}")).unwrap_or_default();
    let hidden = if arg.is_hide_set() { " (hidden)" } else { "" };
    match scope {
        "" => format!("`{long}`{hidden}"),
        _ => format!("`{scope} {long}`{hidden}"),
    }
}

/// The default value, or what the help says happens without one.
fn default(arg: &Arg) -> String {
    let values: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if !values.is_empty() {
        return format!("`{}`", values.join(","));
    }
    let help = help(arg);
    ["[default: ", "(default: "]
        .iter()
        .find_map(|open| {
            let start = help.find(open)? + open.len();
            let rest = help.get(start..)?;
            let end = rest.find([']', ')'])?;
            rest.get(..end).map(str::to_owned)
        })
        .unwrap_or_else(|| "unset".to_owned())
}

/// The argument's whole help text, on one line.
fn help(arg: &Arg) -> String {
    arg.get_long_help()
        .or_else(|| arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn setting_section(page: &mut String, scope: &str, arg: &Arg) {
    let _ = write!(
        page,
        "\n### `{env}`\n\n- flag: {flag}\n- default: {default}\n",
        env = env_name(arg),
        flag = flag(scope, arg),
        default = default(arg),
    );
    if has_values(arg) {
        page.push_str("- values:\n");
        values_list(page, arg, "  ");
    }
    let _ = writeln!(page, "\n{}.", escape(help(arg).trim_end_matches('.')));
}

/// Whether the argument takes one of named values (not `true` or `false`, which need no list).
fn has_values(arg: &Arg) -> bool {
    let names: Vec<String> = arg
        .get_possible_values()
        .iter()
        .map(|v| v.get_name().to_owned())
        .collect();
    arg.get_action().takes_values() && !names.is_empty() && names != ["true", "false"]
}

/// The argument's values, each with its help, as a list indented by `indent`.
fn values_list(page: &mut String, arg: &Arg, indent: &str) {
    for value in arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
    {
        let text = value.get_help().map(|h| h.to_string()).unwrap_or_default();
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let name = value.get_name();
        if text.is_empty() {
            let _ = writeln!(page, "{indent}- `{name}`");
        } else {
            let _ = writeln!(page, "{indent}- `{name}`: {}", escape(&text));
        }
    }
}

/// The subcommands and their options (those not settings too), from their definitions.
fn commands_section(page: &mut String, command: &clap::Command) {
    page.push_str("\n## Commands\n");
    for sub in command.get_subcommands() {
        let about = sub
            .get_long_about()
            .or_else(|| sub.get_about())
            .map(|a| a.to_string())
            .unwrap_or_default();
        let about = about.split_whitespace().collect::<Vec<_>>().join(" ");
        let _ = write!(
            page,
            "\n### `agent-as-model {name}`\n\n{about}.\n\n",
            name = sub.get_name(),
            about = escape(about.trim_end_matches('.')),
        );
        for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            command_option(page, arg);
        }
    }
}

/// One option of a subcommand: its name, default, help and values.
fn command_option(page: &mut String, arg: &Arg) {
    let id = arg.get_id().as_str();
    if id == "help" || id == "version" {
        return;
    }
    let value = arg
        .get_value_names()
        .and_then(|names| names.first())
        .map(|n| n.as_str().to_owned())
        .unwrap_or_else(|| id.to_uppercase());
    let name = match arg.get_long() {
        Some(long) if arg.get_action().takes_values() => format!("--{long} <{value}>"),
        Some(long) => format!("--{long}"),
        None => value,
    };
    let default = match arg.get_default_values() {
        [] => String::new(),
        values => format!(
            " (default `{}`)",
            values
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(",")
        ),
    };
    let _ = writeln!(page, "- `{name}`{default}: {}", escape(&help(arg)));
    if has_values(arg) {
        values_list(page, arg, "  ");
    }
}

/// Help text made safe for Markdown: outside code spans, `<`, `*` and `|` are escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_code = false;
    for c in text.chars() {
        match c {
            '`' => in_code = !in_code,
            '<' if !in_code => {
                out.push_str("&lt;");
                continue;
            }
            '*' | '|' if !in_code => out.push('\\'),
            _ => {}
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_reference_is_the_rendering_of_the_definitions() {
        let path = format!("{}/{PAGE}", env!("CARGO_MANIFEST_DIR"));
        let fresh = render();
        if std::env::var_os("BLESS").is_some() {
            std::fs::write(&path, &fresh).unwrap();
            return;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == fresh,
            "{PAGE} differs from the settings' definitions: write it again with `{REGENERATE}`"
        );
    }

    #[test]
    fn settings_reference_names_every_variable_the_source_reads() {
        let page = render();
        let mut missing = Vec::new();
        let mut files = vec![std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src"
        ))];
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (at, _) in text.match_indices("AGENT_AS_MODEL_") {
                let name: String = text[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                let name = name.trim_end_matches('_');
                if name != "AGENT_AS_MODEL" && !page.contains(&format!("### `{name}`")) {
                    missing.push(format!("{name} ({})", path.display()));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "variables read but not in the reference (define them as clap settings, or add them \
             to OTHER_VARIABLES in src/settings_reference.rs): {missing:?}"
        );
    }

    #[test]
    fn settings_reference_escapes_markdown_outside_code() {
        assert_eq!(
            escape("a <b> `<c|d>` e|f *g*"),
            "a &lt;b> `<c|d>` e\\|f \\*g\\*"
        );
    }
}
