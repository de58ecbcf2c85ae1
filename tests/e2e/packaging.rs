//! What the MCP registry and a newcomer read: server.json and the README agree with the crate.

use serde_json::Value;

#[test]
fn server_json_matches_the_crate_and_the_readme() {
    let server: Value = serde_json::from_str(include_str!("../../server.json")).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    assert!(server["$schema"].as_str().unwrap().contains("/2025-12-11/"));
    assert_eq!(server["version"], version);
    let name = server["name"].as_str().unwrap();
    let description = server["description"].as_str().unwrap();
    assert!(
        !description.is_empty() && description.chars().count() <= 100,
        "{description}"
    );
    let package = &server["packages"][0];
    assert_eq!(package["registryType"], "cargo");
    assert_eq!(package["identifier"], env!("CARGO_PKG_NAME"));
    assert_eq!(package["version"], version);
    assert_eq!(package["transport"]["type"], "stdio");
    let readme = include_str!("../../README.md");
    assert!(
        readme.contains(&format!("mcp-name: {name}")),
        "the README carries the registry's ownership line"
    );
    // The same crate over Streamable HTTP, its URL built from the address it is told to serve.
    let http = &server["packages"][1];
    assert_eq!(http["identifier"], env!("CARGO_PKG_NAME"));
    assert_eq!(http["transport"]["type"], "streamable-http");
    assert_eq!(http["transport"]["url"], "http://{AGENT_AS_MODEL_HTTP}/mcp");
    assert!(
        http["environmentVariables"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "AGENT_AS_MODEL_HTTP" && v["isRequired"] == true)
    );
    // Every environment variable the registry lists is documented in the README.
    for package in server["packages"].as_array().unwrap() {
        for var in package["environmentVariables"].as_array().unwrap() {
            let var = var["name"].as_str().unwrap();
            assert!(readme.contains(var), "{var} is documented in the README");
        }
    }
}
