//! The process as a host launches it: flags, stdout carrying only JSON-RPC, exit on EOF.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

#[test]
fn help_and_version() {
    let out = crate::common::server::Server::new()
        .command()
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let version = String::from_utf8_lossy(&out.stdout);
    let mut lines = version.lines();
    assert_eq!(
        lines.next(),
        Some(format!("agent-as-model {}", env!("CARGO_PKG_VERSION")).as_str())
    );
    // The protocol revisions served, by era.
    let eras = lines.next().unwrap();
    assert!(
        eras.contains("2026-07-28") && eras.contains("legacy 2025-11-25"),
        "{eras}"
    );
    let out = crate::common::server::Server::new()
        .command()
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("AGENT_AS_MODEL_SAMPLING_TIMEOUT_SECS") && help.contains("sampling"),
        "{help}"
    );
    let out = crate::common::server::Server::new()
        .command()
        .arg("--bogus")
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn a_short_state_key_is_refused_at_startup() {
    let out = crate::common::server::Server::new()
        .command()
        .env("AGENT_AS_MODEL_STATE_KEY", "short")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 32 bytes"));
}

/// An empty token, in the variable or the flag, would turn authentication off: the server
/// refuses to start, naming the setting, instead of serving every request.
#[test]
fn an_empty_auth_token_is_refused_at_startup() {
    let port = crate::common::free_port();
    let address = format!("127.0.0.1:{port}");
    for (env, args) in [
        (Some(""), vec![]),
        (Some("   "), vec![]),
        (None, vec!["--auth-token", ""]),
    ] {
        let mut command = crate::common::server::Server::new().command();
        command
            .args(["--http", &address])
            .args(&args)
            .env_remove("AGENT_AS_MODEL_AUTH_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(value) = env {
            command.env("AGENT_AS_MODEL_AUTH_TOKEN", value);
        }
        let mut child = crate::common::Killed(command.spawn().unwrap());
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = child.0.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let status = status.unwrap_or_else(|| panic!("{env:?} {args:?}: the server started"));
        assert_eq!(status.code(), Some(2), "{env:?} {args:?}");
        let mut stderr = String::new();
        std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        assert!(stderr.contains("AGENT_AS_MODEL_AUTH_TOKEN"), "{stderr}");
    }
}

#[test]
fn stdout_is_only_json_rpc_and_the_process_exits_when_stdin_closes() {
    let mut child = crate::common::server::Server::new()
        .command()
        .env("RUST_LOG", "debug") // even with every log line on, stdout stays clean
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_models","arguments":{}}}"#,
    ];
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
    }
    stdin.flush().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut replies = Vec::new();
    for _ in 0..2 {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).expect("every stdout line is JSON");
        assert_eq!(v["jsonrpc"], "2.0");
        replies.push(v);
    }
    assert_eq!(replies[0]["result"]["serverInfo"]["name"], "agent-as-model");
    assert!(
        replies[1]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("agent-default")
    );
    drop(stdin);
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the server did not exit on EOF"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(rest.trim().is_empty(), "nothing else on stdout: {rest}");
}
