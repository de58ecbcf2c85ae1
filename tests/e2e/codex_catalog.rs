//! Codex CLI given a model name of its own catalog: it sends that model's newest request
//! shapes. `gpt-5.6-sol` (a "responses lite" name) declares its tools in an `additional_tools`
//! input item: `exec`, a freeform tool of the implicit `functions` namespace held by a Lark
//! grammar (JavaScript that calls Codex's other tools), and the `collaboration` namespace
//! (`list_agents`, `spawn_agent`, …). A call of each must come back as Codex declared it, or
//! Codex answers "unsupported call"; its result must reach the model. A child of `api_clis`
//! (its World, Server and runs).

use super::*;

/// A catalog name whose requests carry `additional_tools`.
const SOL: &str = "gpt-5.6-sol";

/// Codex CLI as [`codex`] runs it, given `model`.
fn codex_as(server: &Server, model: &str, prompt: &str) -> Cli {
    let mut cli = codex(server, prompt);
    for arg in &mut cli.args {
        if arg.starts_with("model=") {
            *arg = format!("model={model}");
        }
    }
    cli
}

/// The tool message of a forwarded chat request that answers the call of `tool`, if any.
fn tool_result<'a>(seen: &'a Seen, tool: &str) -> Option<&'a Value> {
    let messages = seen.body["messages"].as_array()?;
    let id = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten())
        .find(|c| c["function"]["name"] == tool)?["id"]
        .clone();
    messages
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
}

#[tokio::test]
async fn codex_with_a_catalog_name_runs_exec_and_a_namespaced_tool_through_a_provider() {
    const ANSWER: &str = "Codex ran both: the kettle is behind the plums and no agent is live.";
    let script = format!(
        "const r = await tools.exec_command({{cmd: \"cat {FILE_NAME}\"}});\ntext(r.output);"
    );
    let provider = Scripted::start(vec![
        Reply::json(
            200,
            &tool_call("call_exec_1", "exec", &json!({"input": script})),
        ),
        Reply::json(200, &tool_call("call_agents_1", "list_agents", &json!({}))),
        Reply::json(200, &completion(ANSWER)),
    ])
    .await;
    let world = World::new("codex-catalog");
    let models = entry("codex", &[SOL], &provider, "upstream-codex", false);
    let server = Server::start(&world, &models).await;
    let cli = codex_as(
        &server,
        SOL,
        "Where is the spare kettle? Run cat hello.txt.",
    );
    let run = run(&world, &server, cli).await;
    assert!(run.succeeded(), "{run}");
    assert!(
        run.stdout.contains(ANSWER),
        "the answer is not on stdout{run}"
    );
    let seen = provider.seen();
    assert_eq!(
        seen.len(),
        3,
        "the exec call, the list_agents call, the answer{run}"
    );
    let offered = tool_names(&seen[0]);
    for tool in ["exec", "list_agents", "spawn_agent"] {
        assert!(
            offered.iter().any(|t| t == tool),
            "{tool} not offered: {offered:?}{run}"
        );
    }
    let exec = &seen[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "exec")
        .unwrap()["function"];
    assert!(
        exec["parameters"]["properties"]["input"]["pattern"].is_string(),
        "exec's grammar is not its input's pattern: {exec}{run}"
    );
    // Codex ran the script (its nested exec_command read the file) and sent its output back.
    let ran = tool_result(&seen[1], "exec")
        .unwrap_or_else(|| panic!("no result of exec: {}{run}", seen[1].body["messages"]));
    assert!(ran["content"].to_string().contains(FILE_LINE), "{ran}{run}");
    // The namespaced call came back to Codex under its namespace: it ran it.
    let listed = tool_result(&seen[2], "list_agents").unwrap_or_else(|| {
        panic!(
            "no result of list_agents: {}{run}",
            seen[2].body["messages"]
        )
    });
    let listed = listed["content"].to_string();
    assert!(!listed.contains("unsupported"), "{listed}{run}");
    assert_no_client_credential(&seen);
}

/// On the embedded model: the model calls `exec` (its call held to exec's grammar, inside the
/// arguments the model writes), Codex runs it and asks again with the call and its output, which
/// the model reads on from its cache. Codex prints no item for a code-mode `exec` in `--json`, and
/// in one turn of `codex exec` a second request follows only a tool's output: the server's log
/// of answers shows the round trip. (Whether the 0.5B model writes JavaScript that reads the file
/// is the model's skill, not the wire's: not asserted.)
#[tokio::test]
async fn codex_with_a_catalog_name_runs_exec_on_the_embedded_model() {
    let _turn = crate::local::TURN.lock().await;
    let world = World::new("codex-catalog-local");
    let server = Server::start_with(
        &world,
        &local_entry(&[SOL]),
        &[("AGENT_AS_MODEL_LOCAL_SEED", "7")],
    )
    .await;
    let mut cli = codex_as(
        &server,
        SOL,
        &format!(
            "Call the exec tool with this JavaScript: \
             text((await tools.exec_command({{cmd: \"cat {FILE_NAME}\"}})).output) \
             and then tell me where the spare kettle is."
        ),
    );
    cli.args.insert(1, "--json".into());
    let run = run_until(&world, &server, cli, LOCAL_LIMIT, |_, log| {
        local_answers(log).len() >= 2
    })
    .await;
    let answers = local_answers(&run.server_log);
    eprintln!("Codex ({SOL}) on the embedded model: answers {answers:?}");
    assert!(
        answers.len() >= 2,
        "Codex did not ask again after the model's exec call: {answers:?}{run}"
    );
    let (first, second) = (&answers[0], &answers[1]);
    assert!(
        second.prompt_tokens > first.prompt_tokens,
        "the second request does not carry the call and its output: {answers:?}{run}"
    );
    assert!(
        second.cached_tokens * 10 >= second.prompt_tokens * 9,
        "the second turn read {} of its {} prompt tokens from the cache, under 90%{run}",
        second.cached_tokens,
        second.prompt_tokens
    );
    if run.status.is_some() {
        assert!(run.succeeded(), "{run}");
    }
}
