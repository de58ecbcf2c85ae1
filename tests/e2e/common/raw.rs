//! A raw JSON-RPC peer over the binary's stdio, for what an SDK client will not send: garbage,
//! faulty sampling answers, cancellations, closed pipes.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

pub struct Raw {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Receiver<String>,
    /// The tool of each `tools/call` sent, by request id, when the peer is this server itself
    /// (no subcommand): its results are checked against the tool's declared `outputSchema`.
    calls: Option<std::sync::Mutex<std::collections::HashMap<String, String>>>,
}

/// This server's declared `outputSchema`s, by tool name.
fn output_schemas() -> &'static std::collections::HashMap<String, Value> {
    static SCHEMAS: std::sync::OnceLock<std::collections::HashMap<String, Value>> =
        std::sync::OnceLock::new();
    SCHEMAS.get_or_init(|| {
        [
            include_str!("../../../src/shapes/tools/chat_complete.json"),
            include_str!("../../../src/shapes/tools/messages_create.json"),
            include_str!("../../../src/shapes/tools/responses_create.json"),
            include_str!("../../../src/shapes/tools/generate.json"),
            include_str!("../../../src/shapes/tools/generate_content.json"),
            include_str!("../../../src/shapes/tools/list_models.json"),
        ]
        .iter()
        .map(|text| {
            let def: Value = serde_json::from_str(text).unwrap();
            (
                def["name"].as_str().unwrap().to_owned(),
                def["outputSchema"].clone(),
            )
        })
        .collect()
    })
}

/// Panics when a successful `tools/call` result's `structuredContent` does not validate
/// against the tool's `outputSchema`, as the official SDKs refuse it.
pub fn assert_valid_result(tool: &str, response: &Value) {
    let Some(result) = response.get("result") else {
        return;
    };
    if result["isError"] == true || result.get("resultType").is_some_and(|t| t != "complete") {
        return;
    }
    let Some(schema) = output_schemas().get(tool) else {
        return;
    };
    let instance = result
        .get("structuredContent")
        .unwrap_or_else(|| panic!("{tool} returned no structuredContent: {response}"));
    let validator = jsonschema::validator_for(schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.is_empty(),
        "Invalid structured content returned by tool {tool}: {errors:?} in {instance}"
    );
}

impl Raw {
    pub fn spawn(env: &[(&str, &str)]) -> Raw {
        Raw::spawn_args(&[], env)
    }

    /// The binary with arguments (`bridge -- …`, say).
    pub fn spawn_args(args: &[&str], env: &[(&str, &str)]) -> Raw {
        let mut child = super::server::Server::new()
            .args(args)
            .env_remove("RUST_LOG")
            .envs(env)
            .command()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let err_pipe = child.stderr.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (etx, stderr) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err_pipe).lines() {
                let Ok(line) = line else { break };
                if etx.send(line).is_err() {
                    break;
                }
            }
        });
        Raw {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
            calls: args.is_empty().then(Default::default),
        }
    }

    /// Spawns and completes a legacy handshake declaring `capabilities`.
    pub fn legacy(env: &[(&str, &str)], capabilities: Value) -> Raw {
        Raw::legacy_args(&[], env, capabilities)
    }

    /// [`Raw::legacy`] for the binary with arguments.
    pub fn legacy_args(args: &[&str], env: &[(&str, &str)], capabilities: Value) -> Raw {
        let mut raw = Raw::spawn_args(args, env);
        raw.send(
            &json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities,
            "clientInfo": {"name": "raw", "version": "0"}}}),
        );
        let init = raw
            .recv_id(&json!("init"), Duration::from_secs(10))
            .expect("initialize answered");
        assert_eq!(init["result"]["serverInfo"]["name"], "agent-as-model");
        raw.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        raw
    }

    pub fn send(&mut self, v: &Value) {
        if let (Some(calls), "tools/call", Some(id), Some(tool)) = (
            &self.calls,
            v["method"].as_str().unwrap_or(""),
            v.get("id"),
            v["params"]["name"].as_str(),
        ) {
            calls
                .lock()
                .unwrap()
                .insert(id.to_string(), tool.to_owned());
        }
        self.send_line(&v.to_string());
    }

    pub fn send_line(&mut self, line: &str) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = writeln!(stdin, "{line}");
            let _ = stdin.flush();
        }
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next stdout line, parsed; every line must be JSON.
    pub fn recv(&self, timeout: Duration) -> Option<Value> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => {
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
                let tool = match (&self.calls, v.get("id")) {
                    (Some(calls), Some(id)) if v.get("method").is_none() => {
                        calls.lock().unwrap().get(&id.to_string()).cloned()
                    }
                    _ => None,
                };
                if let Some(tool) = tool {
                    assert_valid_result(&tool, &v);
                }
                Some(v)
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Reads messages until one matches, returning it; the others are kept in `skipped`.
    pub fn recv_matching(
        &self,
        timeout: Duration,
        skipped: &mut Vec<Value>,
        pred: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self.recv(left)?;
            if pred(&v) {
                return Some(v);
            }
            skipped.push(v);
        }
    }

    /// The response with `id`.
    pub fn recv_id(&self, id: &Value, timeout: Duration) -> Option<Value> {
        self.recv_matching(timeout, &mut Vec::new(), |v| {
            v.get("id") == Some(id) && v.get("method").is_none()
        })
    }

    /// The next server-to-client request with `method`.
    pub fn recv_request(&self, method: &str, timeout: Duration) -> Option<Value> {
        self.recv_matching(timeout, &mut Vec::new(), |v| {
            v["method"] == method && v.get("id").is_some()
        })
    }

    /// Everything written to stderr so far.
    pub fn stderr(&self) -> String {
        let mut all = Vec::new();
        while let Ok(line) = self.stderr.recv_timeout(Duration::from_millis(50)) {
            all.push(line);
        }
        all.join("\n")
    }

    /// Waits for the process to exit on its own.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn tools_call(id: Value, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
}
